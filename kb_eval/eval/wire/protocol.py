"""The messages across the candidate's process boundary, typed: what the parent tells a
candidate's run child (`CandidateTask`), checked when it is sent and parsed again when
it is read (child/worker.py), so neither side reads a key the other never wrote."""

from __future__ import annotations

from typing import Literal

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
    reference_call_ms: float | None = None  # the reference's pace (timing.slow_cut)
    count_launches: bool = False
    device_lock: str | None = None  # the device's lock file (kb_eval/devlock.py)
    paired: PairedSpec | None = None  # paired timing's folder (schedule/pairing.py)
    exchange: dict | None = None  # output buffers on the device (wire/device.py's spec)
    gate: str | None = None  # the verdict gate's folder (schedule/gate.py)
