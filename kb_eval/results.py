"""Schemas of every file we write, and how we write them (atomically).

Each file carries `schema_version`, the hardware, torch/CUDA versions, the precision and
what produced it, so numbers from different machines or settings are never mixed by
accident. Writes go to a temp file in the same folder and are renamed over the target:
a crash leaves the previous complete file, never half a JSON.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from kb_eval import __version__
from kb_eval.errors import UserError
from kb_eval.timing import TimingSettings, TimingStats

SCHEMA_VERSION = 1
RESULTS_DIR = Path("results")
M = TypeVar("M", bound=BaseModel)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_model() -> str:
    """The CPU's marketing name. platform.processor() is empty on many Linux machines (an
    AMD EPYC gave ""), so read /proc/cpuinfo's "model name" (x86) or its ARM fields
    first; fall back to platform's answers."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "cpu model", "hardware", "processor"):
        value = fields.get(key, "")
        if value and not value.isdigit():  # x86's "processor : 0" is an index, not a name
            return value
    return platform.processor() or platform.machine() or "unknown CPU"


class HardwareInfo(BaseModel):
    device: str  # "cuda" or "cpu"
    name: str
    slug: str
    torch_version: str
    cuda_version: str | None = None
    capability: str | None = None
    num_sms: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    cpu: str = Field(default_factory=cpu_model)
    cpu_count: int = Field(default_factory=lambda: os.cpu_count() or 1)
    python: str = Field(default_factory=lambda: sys.version.split()[0])

    @classmethod
    def detect(cls, device: str | None = None) -> "HardwareInfo":
        """Describe the device that `device` (default: cuda:0 if present) names."""
        import torch

        use_cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
        if not use_cuda:
            return cls(device="cpu", name=cpu_model(),
                       slug="cpu", torch_version=torch.__version__)
        idx = torch.device(device or "cuda").index or 0
        p = torch.cuda.get_device_properties(idx)
        return cls(device="cuda", name=p.name, slug=slugify(p.name),
                   torch_version=torch.__version__, cuda_version=torch.version.cuda,
                   capability=f"{p.major}.{p.minor}", num_sms=p.multi_processor_count,
                   l2_bytes=getattr(p, "L2_cache_size", None), memory_bytes=p.total_memory)


class Producer(BaseModel):
    tool: str
    version: str = __version__
    argv: list[str] = Field(default_factory=lambda: list(sys.argv))  # this invocation's
    # Every invocation that wrote the file, oldest first (a --resume adds one): a file
    # continued three times says so, instead of showing only the last command.
    invocations: list[list[str]] = Field(default_factory=list)

    def continuing(self, old: "Producer | None") -> "Producer":
        """This producer, with the invocations of the file it continues before its own."""
        past = (old.invocations or [old.argv]) if old is not None else []
        return self.model_copy(update={"invocations": [*past, list(self.argv)]})


def stored_fields(path: Path) -> dict:
    """The top-level fields of a file about to be continued ({}: none, or unreadable)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def stored_producer(path: Path) -> Producer | None:
    """produced_by of a file about to be continued (None: no file, or none readable)."""
    try:
        return Producer.model_validate(stored_fields(path)["produced_by"])
    except (KeyError, ValidationError):
        return None


class FileHeader(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str
    created: str = Field(default_factory=now_iso)
    updated: str = Field(default_factory=now_iso)
    produced_by: Producer
    hardware: HardwareInfo
    precision: str
    timing: TimingSettings


# ------------------------------------------------------------------ baseline
class BaselineVisit(BaseModel):
    """One child's timing of a problem: its kept call times in call order (ms), what the
    GPU was doing before and after them (kb_eval.gpu_state; None on a CPU) and how fast
    the host ran then (kb_eval.host_state: ms of fixed work, before and after)."""
    samples_ms: list[float]
    launch_ms: float | None = None
    wall_s: float | None = None
    gpu: dict | None = None
    host_work_ms: list[float] | None = None
    # A launch-heavy problem is timed until the host has shown its full pace, the fastest
    # timing kept (host_state.timed_at_full_pace): the pace probe (ms to launch 2,000
    # kernels; the host work on a CPU) before and after the kept timing, the timings
    # made, and whether two agreed at full pace (None: launch share under
    # host_state.PACE_SENSITIVE, the pace did not matter). None in files from before.
    launch_pace_ms: list[float] | None = None
    host_tries: int | None = None
    host_full_pace: bool | None = None


class BaselineRecord(BaseModel):
    key: str
    source: str
    level: int
    problem_id: int
    name: str
    status: str  # ok | error | crashed | timeout | oom | ...
    error: str | None = None
    output_tail: str | None = None
    timing: TimingStats | None = None
    wall_s: float | None = None
    # The most device memory one reference forward held, its inputs included (bytes; on a
    # CPU: its inputs and outputs). The eval's memory plan reads it.
    peak_mem_bytes: int | None = None
    # A compiled baseline's build (TVM: target, arch, arch_source, tune_trials)
    compiler: dict | None = None
    # The GPU before and after the timed calls (kb_eval/gpu_state.py: SM clock, temperature,
    # power, slowdowns), and the CPU core the calls were launched from; None on a CPU.
    gpu: dict | None = None
    core: int | None = None
    # How fast the host ran before and after the timed calls (kb_eval/host_state.py: ms of
    # one fixed piece of host work; a host-paced reference's time follows it). None in
    # older files.
    host_work_ms: list[float] | None = None
    # Each visit's timed calls: a problem is timed in the file's `visits` visits, one per
    # sweep over the problems, and `timing` is the statistic of all their calls. Until the
    # last visit the status is "partial" (a resumed run makes the rest). [] in files from
    # before visits.
    visits: list[BaselineVisit] = Field(default_factory=list)


class BaselineFile(FileHeader):
    kind: str = "baseline"
    mode: str = "eager"  # eager | compile-default | compile-reduce-overhead | compile-max-autotune
    # Visits per problem (BaselineRecord.visits); 1 in files from before visits.
    visits: int = 1
    records: dict[str, BaselineRecord] = Field(default_factory=dict)


def baseline_path(root: Path, hw_slug: str, precision: str, mode: str = "eager", *,
                  source: str) -> Path:
    """results/baseline/<hw>/<source-slug>/<precision>[_<mode>].json: one file per problem
    source, so that timing ops and then bert never merges their records into one file.
    `source` is a problem's source label (Problem.source: ops, bert, hf, local-<dir>)."""
    suffix = "" if mode == "eager" else f"_{mode}"
    return Path(root) / "baseline" / hw_slug / slugify(source) / f"{precision}{suffix}.json"


# ------------------------------------------------------------------ run results
# Defined by the evaluation stage (kb_eval/eval); one SampleRecord per evaluated sample.
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
    # calls whose outputs were also checked (--recheck-timed).
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


class SampleRecord(BaseModel):
    model_config = {"extra": "allow"}
    key: str
    sample: int = 0
    turn: int = 0
    source: str = ""
    level: int = 0
    problem_id: int = 0
    name: str = ""
    backend: str = ""
    precision: str = ""
    source_sha256: str = ""
    # The candidate's: correct | incorrect | compile_error | runtime_error | crashed |
    # timeout | oom | output_flood. The evaluator's or the problem's (HARNESS_STATUSES,
    # counted apart, never a candidate failure): eval_error | reference_error | too_large.
    status: str = "not_run"
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
    speedup: float | None = None  # baseline median / candidate median, correct samples only
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
    finished: str = Field(default_factory=now_iso)


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
    geomean_speedup: float | None = None  # over correct samples
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


# ------------------------------------------------------------------ IO
def _umask() -> int:
    """The process umask, read without changing it where Linux shows it (os.umask can only
    be read by setting it, a race with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, data: BaseModel | dict | list) -> None:
    """Write JSON via a temp file in the same folder and an atomic rename. mkstemp makes
    its file 0600; the result gets the mode a plain open() would (0666 less the umask), so
    results can be shared like any other file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (data.model_dump_json(indent=1) if isinstance(data, BaseModel)
            else json.dumps(data, indent=1, default=str))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_model(path: Path, cls: type[M]) -> M:
    """Load and validate a file we wrote; a broken or foreign file is a user error."""
    try:
        raw: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    if isinstance(raw, dict) and raw.get("schema_version") not in (None, SCHEMA_VERSION):
        raise UserError(f"{path} has schema_version {raw.get('schema_version')}, "
                        f"this kb-eval reads {SCHEMA_VERSION}")
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        raise UserError(f"{path}: field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


# results.json as a pandas DataFrame, one row per sample (kb_eval/frames.py; it imports
# pandas only when called, so this module stays light).
from kb_eval.frames import to_frame  # noqa: E402,F401
