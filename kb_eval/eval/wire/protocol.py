"""The messages across the candidate's process boundary, typed: what the parent tells a
candidate's run child (`CandidateTask`, checked when sent and parsed again when read),
and what the pairing thread makes of the paired rounds (`PairedTiming`). The reference
server's messages are wire/reference.py's."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kb_eval.timing import TimingSettings


class PairedSpec(BaseModel):
    """Where the child and the parent's pairing thread meet (schedule/pairing.py)."""
    model_config = ConfigDict(extra="forbid")
    dir: str


class CandidateTask(BaseModel):
    """One run child's task (kb_eval.eval.child.worker:run_candidate)."""
    model_config = ConfigDict(extra="forbid")

    problem_code: str
    source: str
    extensions_dir: str | None = None  # the build's folder, where its extensions are
    device: str  # a torch device: cuda:0, cpu
    precision: Literal["fp32", "fp16", "bf16"]
    seed: int  # the problem's derived seed: the correctness trials' inputs
    correct_trials: int = Field(ge=1)
    timing: TimingSettings | None = None  # None: judge only, no timing step
    recheck_timed: int = Field(0, ge=0)
    # the reference's pace, its call and of it launching, as the parent planned `timing`
    # with them: the child plans again with its own pace (timing.plan_timing)
    reference_call_ms: float | None = None
    reference_launch_ms: float | None = None
    count_launches: bool = False
    device_lock: str | None = None  # the device's lock file (kb_eval/devlock.py)
    paired: PairedSpec | None = None  # paired timing's folder (schedule/pairing.py)
    exchange: dict | None = None  # output buffers on the device (wire/device.py's spec)
    gate: str | None = None  # the verdict gate's folder (schedule/gate.py)


class PairedTiming(BaseModel):
    """A sample's paired timing, from schedule/pairing.finish_pairing to the verdict and the
    phases: the reference's rounds, or why there are none. Read by key as well (`get`,
    `[]`); a key that is no field is refused."""
    model_config = ConfigDict(extra="forbid")

    rounds: list[list[float]] | None = None  # the reference's times, per round
    error: str | None = None  # why the pairing failed (the unpaired interval stays)
    timing: TimingSettings | None = None  # the settings both sides used, when cut
    busy_ms: float = 0.0  # the longest the GPU stayed busy with other work, stopped
    launch_ms: float | None = None  # the reference's median launch time (GPU)
    ref_wall_s: float = 0.0  # the reference's rounds from stop to resume
    ref_calls_s: float = 0.0  # of it, in its timed calls
    ref_spent: dict[str, float] = Field(default_factory=dict)  # the server's account

    def get(self, key: str, default: Any = None) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(f"PairedTiming has no field {key!r}")
        value = getattr(self, key)
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)
