"""The baseline file's schema (results/baseline/<hw>/<source>/<precision>[_<mode>].json):
one record per problem, the reference's timing in one or more visits."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from kb_eval.result_files import FileHeader, slugify
from kb_eval.timing import TimingStats
from kb_eval.work import ProblemWork


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
    work: ProblemWork | None = None  # the reference's FLOPs and compulsory bytes (work.py)


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


