"""The run file's schema (results.json): one SampleRecord per evaluated sample and the
run's summary, defined by the evaluation stage (kb_eval/eval).

The header every file carries and how files are written are kb_eval/result_files.py's,
the baseline file's schema kb_eval/baseline_file.py's; their names are imported here too,
so that `from kb_eval.results import ...` reaches every schema.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kb_eval.baseline_file import (  # noqa: F401 - re-exported
    BaselineFile, BaselineRecord, BaselineVisit, baseline_path)
from kb_eval.result_files import (  # noqa: F401 - re-exported
    RESULTS_DIR, SCHEMA_VERSION, FileHeader, HardwareInfo, Producer, cpu_model, now_iso,
    read_model, slugify, stored_fields, stored_producer, write_json_atomic)
from kb_eval.timing import TimingStats
from kb_eval.work import ProblemWork, SolShare


class Flag(BaseModel):
    """A finding of a guard: `error` makes the sample incorrect, `warning` is reported."""
    code: str
    severity: str = "warning"  # info | warning | error
    message: str = ""


class CrashInfo(BaseModel):
    phase: str  # build | load | correctness | timing | reference
    kind: str  # segfault | abort | killed | exit | timeout | oom | output_flood | cuda_error | error
    exit_code: int | None = None
    signal: str | None = None
    output_tail: str = ""


class BuildInfo(BaseModel):
    cache_key: str
    cache_hit: bool = False
    # ok | skipped (nothing to compile) | deferred (to the run child) | compile_error |
    # crashed | timeout | oom | output_flood
    status: str = "ok"
    seconds: float = 0.0
    # What the build's child tried that its sandbox refused (kb_eval/isolation/refusals.py)
    refused: list[str] = Field(default_factory=list)
    # Seconds the build pool spent calling the model once on meta inputs, so that a
    # compile the candidate starts inside a function runs here, not on the device lane
    # (kb_eval/eval/schedule/first_call.py); None when not tried.
    first_call_s: float | None = None
    # The torch/extension.h its CUDA files were compiled with: "lean" (the Tensor class
    # and the factories), "slim" (torch/types.h), "full", several joined by "+" when its
    # files differed ("lean+full"), None without CUDA files (kb_eval/eval/schedule/
    # nvcc_front.py).
    cuda_header: str | None = None


class LaunchCounts(BaseModel):
    """Launches per forward, one profiled call each after correctness, outside timing
    (kb_eval/profile/launches.py). unit: cuda_kernels (kernels launched, memcpy/memset
    apart) | aten_ops (CPU: aten operators called from outside any other). `candidate`
    is what the candidate's own child reported (untrusted: diagnostics, never scored);
    `reference` was counted by the trusted reference server, once per problem."""
    unit: str | None = None
    candidate: int | None = None
    reference: int | None = None
    candidate_source: str = "candidate child (untrusted)"
    error: str | None = None  # why a side has no count


class CorrectnessInfo(BaseModel):
    # Comparisons made: `trials` = `correct_trials` correctness trials (fresh inputs each)
    # + `shape_probes` (the same call at another batch size) + `rechecked_timed` timed
    # calls whose outputs were also checked (the config's recheck_timed).
    trials: int = 0
    correct_trials: int = 0
    shape_probes: int = 0
    rechecked_timed: int = 0
    passed: int = 0
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    max_rel_diff: float | None = None
    atol: float | None = None
    rtol: float | None = None
    failures: list[str] = Field(default_factory=list)
    # Which rule decided (f64: against the reference run in float64; kernelbench: allclose
    # at atol/rtol), each rule's verdict (f64 None: not computed), why f64 did not decide
    # when it was asked, and where atol/rtol came from (default | problem | flag).
    rule: str = "kernelbench"
    verdicts: dict[str, bool | None] = Field(default_factory=dict)
    fallback: str | None = None
    f64_ratio: float | None = None  # worst error / its float64 bound (<= 1 passes)
    f64_norm_ratio: float | None = None
    f64_bound: dict[str, float] | None = None  # k, k_norm
    tolerance_source: str | None = None


# A sample's status. The candidate's: correct | incorrect | compile_error | runtime_error |
# crashed | timeout | oom | output_flood. The evaluator's or the problem's
# (HARNESS_STATUSES, counted apart, never a candidate failure): eval_error |
# reference_error | too_large. The run stage's, for answers never evaluated
# (kb_eval/run/records.py): inference_error (no answer), no_code | no_model_new |
# syntax_error (no usable code: kb_eval/inference/extract.py). not_run: not yet judged.
SampleStatus = Literal[
    "correct", "incorrect", "compile_error", "runtime_error", "crashed", "timeout", "oom",
    "output_flood", "eval_error", "reference_error", "too_large", "inference_error",
    "no_code", "no_model_new", "syntax_error", "not_run"]
STATUSES: tuple[str, ...] = get_args(SampleStatus)

# Record keys that earlier versions wrote and this one no longer has: dropped when a file
# is read (SampleRecord._drop_retired), so old results still load; any other unknown key
# is refused. None so far.
RETIRED_FIELDS: frozenset[str] = frozenset()


class SampleRecord(BaseModel):
    # Every field declared: a misspelt or undeclared one is refused, when a record is
    # made, assigned to or read back from a file.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    key: str
    sample: int = 0
    turn: int = 0
    source: str = ""
    level: int = 0
    problem_id: int = 0
    name: str = ""
    backend: str = ""
    sandbox: bool | None = None  # built and run in the sandbox (False: --no-sandbox)
    precision: str = ""
    source_sha256: str = ""
    status: SampleStatus = "not_run"  # SampleStatus above says which is whose
    compiled: bool = False
    correct: bool = False
    error: str | None = None  # one line
    detail: str | None = None  # trimmed compiler output, traceback or output tail
    crash: CrashInfo | None = None
    build: BuildInfo | None = None
    correctness: CorrectnessInfo | None = None
    timing: TimingStats | None = None
    baseline: TimingStats | None = None
    baseline_source: str | None = None  # file | live
    # The reference's median / the candidate's, correct samples only: both from the rounds
    # timed in pairs (one reference time per sample), else the reference timed alone
    speedup: float | None = None
    # The baseline file's median / the candidate's (a run with a baseline file): for
    # leaderboards and compile-mode comparisons, never the headline
    speedup_vs_baseline: float | None = None
    # 95 % interval of the speedup (kb_eval/eval/judge/confidence.py) and how it was had
    speedup_ci: list[float] | None = None
    speedup_ci_method: str | None = None
    flags: list[Flag] = Field(default_factory=list)
    wall_s: float = 0.0
    # Seconds per step (build, wait for a device, run, reference, read, judge): where an
    # evaluation's time goes.
    phases: dict[str, float] = Field(default_factory=dict)
    # Device memory (bytes): the reference's footprint and free memory from the plan, the
    # candidate's own peak (its child's report: diagnostics, never scored).
    memory: dict[str, int | None] = Field(default_factory=dict)
    retried: str | None = None  # why the sample was evaluated a second time, if it was
    # Whether the reference gave bit-identical outputs on the same inputs twice (None: not
    # measured): a non-deterministic reference needs a tolerance, not equality.
    reference_deterministic: bool | None = None
    launches: LaunchCounts | None = None  # correct samples only
    # The problem's work, and (correct samples) the share of the machine's peaks the
    # sample and the reference reached (kb_eval/work.py, kb_eval/eval/judge/sol.py)
    work: ProblemWork | None = None
    sol: SolShare | None = None
    # The verdict's: a speedup that no flag voids (the score applies its own rule,
    # judge/score.counted_speedup; this says it in the file). None: not judged.
    speedup_counted: bool | None = None
    # the Ray executor (schedule/ray_executor.py): the lane that judged it ("node/device"),
    # and one note per lane that died while judging it (it was queued again).
    lane: str | None = None
    requeued: list[str] | None = None
    # The answer's facts (kb_eval/run/records.py), None where the sample did not come from
    # the run stage: the model asked, where its code was saved (under the run's folder;
    # the eval stage records it too), tokens, USD, seconds of the answering request,
    # whether it came from the response cache, why it ended, requests sent.
    model: str | None = None
    code_path: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    latency_s: float | None = None
    response_cached: bool | None = None
    finish_reason: str | None = None
    attempts: int | None = None
    finished: str = Field(default_factory=now_iso)

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data):
        """Keys of earlier versions that this one no longer has (RETIRED_FIELDS), dropped."""
        if isinstance(data, dict) and RETIRED_FIELDS.intersection(data):
            data = {k: v for k, v in data.items() if k not in RETIRED_FIELDS}
        return data


# Statuses that say the evaluator (or the problem) could not judge the sample: no verdict
# on the candidate. `--resume` evaluates such samples again.
HARNESS_STATUSES = frozenset({"eval_error", "reference_error", "too_large"})


class RunSummary(BaseModel):
    model_config = {"extra": "allow"}
    problems: int = 0  # problems asked: the denominator of every rate
    samples_per_problem: int = 1
    samples: int = 0  # records present
    compiled_rate: float = 0.0
    correct_rate: float = 0.0
    fast_p: dict[str, float] = Field(default_factory=dict)  # fast_0 .. fast_2
    # The same, counting a sample only when its speedup interval's lower end is above p
    fast_p_sig: dict[str, float] = Field(default_factory=dict)
    # Share of problems with a counted sample at >= p of the speed of light (sol_0.5 ...)
    sol_p: dict[str, float] = Field(default_factory=dict)
    geomean_speedup: float | None = None  # over correct samples
    # The same of speedup_vs_baseline (a run with a baseline file): the baseline file's
    # figure, for leaderboards; never the headline
    geomean_vs_baseline: float | None = None
    pass_at_k: dict[str, float] = Field(default_factory=dict)  # "pass@1", ...
    status_counts: dict[str, int] = Field(default_factory=dict)
    # Samples the evaluator could not judge (HARNESS_STATUSES), and the problems left out
    # of every rate's denominator because none of their samples was judged.
    eval_errors: int = 0
    excluded_problems: list[str] = Field(default_factory=list)
    note: str | None = None
    # The same figures per level ("level1": ...), each over that level's problems asked.
    levels: dict[str, "RunSummary"] = Field(default_factory=dict)


class RunFile(FileHeader):
    kind: str = "run"
    model_config = {"extra": "allow"}
    name: str = ""
    run: str = ""
    backend: str = ""
    source: str = ""
    baseline: str = ""  # path of the baseline file, or "live"
    config: dict = Field(default_factory=dict)
    problems_asked: list[str] = Field(default_factory=list)
    samples_per_problem: int = 1
    samples: list[SampleRecord] = Field(default_factory=list)
    summary: RunSummary | None = None


def level_of(key: str) -> int:
    """The level of a problem key "<source>/level<N>/<id>" (0 if it has none)."""
    m = re.search(r"(?:^|/)level(\d+)/", key)
    return int(m.group(1)) if m else 0


def sample_order(r: SampleRecord) -> tuple:
    """How samples are stored and shown: by level, problem, sample, turn (not by when
    they finished), so that two runs' files line up and diff cleanly."""
    return (r.level, r.problem_id, r.key, r.sample, r.turn)


# results.json as a pandas DataFrame, one row per sample (kb_eval/frames.py; it imports
# pandas only when called, so this module stays light).
from kb_eval.frames import to_frame  # noqa: E402,F401
