"""The baseline file's schema (results/baseline/<hw>/<source>/<precision>[_<mode>].json):
one record per problem, the reference's timing in one or more visits."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from kb_eval.result_files import FileHeader, slugify
from kb_eval.timing import TimingStats
from kb_eval.work import ProblemWork


class BaselineVisit(BaseModel):
    """One child's timing of a problem: its kept call times in call order (ms), the GPU's
    state before and after (gpu_state; None on a CPU) and the host's pace (host_state)."""
    samples_ms: list[float]
    launch_ms: float | None = None
    wall_s: float | None = None
    gpu: dict | None = None
    host_work_ms: list[float] | None = None
    # host_state.timed_at_full_pace: the pace probe before and after the kept timing, the
    # timings made, and whether two agreed at full pace (None: the pace did not matter).
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
    # The most device memory one reference forward held, inputs included (bytes); the
    # eval's memory plan reads it.
    peak_mem_bytes: int | None = None
    # A compiled baseline's build (TVM: target, arch, arch_source, tune_trials)
    compiler: dict | None = None
    # The GPU before and after the timed calls (gpu_state) and the launching CPU core.
    gpu: dict | None = None
    core: int | None = None
    # Host pace before and after the timed calls (host_state.work_ms).
    host_work_ms: list[float] | None = None
    # One entry per visit; `timing` covers all their calls. Status "partial" until the last.
    visits: list[BaselineVisit] = Field(default_factory=list)
    work: ProblemWork | None = None  # the reference's FLOPs and compulsory bytes (work.py)


class BaselineFile(FileHeader):
    kind: str = "baseline"
    mode: str = "eager"  # eager | compile-default | compile-reduce-overhead | compile-max-autotune
    # Visits per problem (BaselineRecord.visits)
    visits: int = 1
    records: dict[str, BaselineRecord] = Field(default_factory=dict)


def baseline_path(root: Path, hw_slug: str, precision: str, mode: str = "eager", *,
                  source: str) -> Path:
    """results/baseline/<hw>/<source-slug>/<precision>[_<mode>].json: one file per problem
    source (Problem.source: ops, bert, hf, local-<dir>)."""
    suffix = "" if mode == "eager" else f"_{mode}"
    return Path(root) / "baseline" / hw_slug / slugify(source) / f"{precision}{suffix}.json"


