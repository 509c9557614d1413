"""The run file's schema (results.json): one SampleRecord per evaluated sample and the
run's summary. The names of result_files.py (header, writing) and baseline_file.py are
re-exported, so that `from kb_eval.results import ...` reaches every schema.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kb_eval.baseline_file import (  # noqa: F401 - re-exported
    BaselineFile, BaselineRecord, BaselineVisit, baseline_path)
from kb_eval.result_files import (  # noqa: F401 - re-exported
    SCHEMA_VERSION, FileHeader, HardwareInfo, Producer, cpu_model, now_iso,
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
    # What the build's child tried that its sandbox refused (isolation/refusals.py)
    refused: list[str] = Field(default_factory=list)
    # Seconds the build pool spent calling the model once on meta inputs, so that a
    # first-call compile runs off the device lane (eval/schedule/first_call.py)
    first_call_s: float | None = None
    # The torch/extension.h its CUDA files were compiled with: lean | slim | full, joined
    # by "+" when its files differed; None without CUDA files (eval/schedule/nvcc_front.py)
    cuda_header: str | None = None


class LaunchCounts(BaseModel):
    """Launches per forward (profile/launches.py), unit cuda_kernels | aten_ops.
    `candidate` is what the candidate's own child reported (untrusted: never scored);
    `reference` was counted by the trusted reference server."""
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
    # Which rule decided (f64: against the float64 reference; kernelbench: allclose at
    # atol/rtol), each rule's verdict, why f64 did not decide when asked, and where
    # atol/rtol came from (default | problem | flag).
    rule: str = "kernelbench"
    verdicts: dict[str, bool | None] = Field(default_factory=dict)
    fallback: str | None = None
    f64_ratio: float | None = None  # worst error / its float64 bound (<= 1 passes)
    f64_norm_ratio: float | None = None
    f64_bound: dict[str, float] | None = None  # k, k_norm
    tolerance_source: str | None = None


# A sample's status: the candidate's (correct ... output_flood), the evaluator's or the
# problem's (HARNESS_STATUSES, never a candidate failure), the run stage's for answers
# never evaluated (inference_error, no_code, no_model_new, syntax_error), or not_run.
SampleStatus = Literal[
    "correct", "incorrect", "compile_error", "runtime_error", "crashed", "timeout", "oom",
    "output_flood", "eval_error", "reference_error", "too_large", "inference_error",
    "no_code", "no_model_new", "syntax_error", "not_run"]
STATUSES: tuple[str, ...] = get_args(SampleStatus)

# Record keys earlier versions wrote: dropped on read, so old results still load; any
# other unknown key is refused.
RETIRED_FIELDS: frozenset[str] = frozenset()


class SampleRecord(BaseModel):
    # A misspelt or undeclared field is refused when made, assigned or read back.
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
    # The reference's median / the candidate's (correct samples), from paired rounds
    speedup: float | None = None
    # The baseline file's median / the candidate's: for leaderboards, never the headline
    speedup_vs_baseline: float | None = None
    # 95 % interval of the speedup (eval/judge/confidence.py) and its method
    speedup_ci: list[float] | None = None
    speedup_ci_method: str | None = None
    flags: list[Flag] = Field(default_factory=list)
    wall_s: float = 0.0
    # Seconds per step (build, wait for a device, run, reference, read, judge)
    phases: dict[str, float] = Field(default_factory=dict)
    # Device memory (bytes): the plan's figures and the candidate's own (untrusted) peak
    memory: dict[str, int | None] = Field(default_factory=dict)
    retried: str | None = None  # why the sample was evaluated a second time, if it was
    # Whether the reference gave bit-identical outputs on the same inputs twice
    reference_deterministic: bool | None = None
    launches: LaunchCounts | None = None  # correct samples only
    # The problem's work and (correct samples) the shares of the machine's peaks reached
    work: ProblemWork | None = None
    sol: SolShare | None = None
    # A speedup that no flag voids (judge/score.counted_speedup). None: not judged.
    speedup_counted: bool | None = None
    # The Ray executor (--ray-address): the lane that judged it ("node/device"), and one
    # note per lane that died while judging it (it was queued again).
    lane: str | None = None
    requeued: list[str] | None = None
    # The answer's facts (run/records.py; code_path is the eval stage's too), None where
    # the sample did not come from the run stage.
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
        """Drop the RETIRED_FIELDS keys."""
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
    # The same of speedup_vs_baseline: for leaderboards, never the headline
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
    """How samples are stored and shown (not by when they finished), so that two runs'
    files line up and diff cleanly."""
    return (r.level, r.problem_id, r.key, r.sample, r.turn)


# results.json as a pandas DataFrame (frames.py imports pandas only when called).
from kb_eval.frames import to_frame  # noqa: E402,F401
