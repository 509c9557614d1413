"""The reference side of a sample: one child per sample, after the candidate's child.

It runs `Model` on the sample's labels (the correctness trials, the shape probe, the timed
calls the candidate reported with their seeds) and compares each output with the
candidate's file at once, on the device (worker.run_reference). Reference outputs never
touch the disk, so nothing a candidate writes can change what it is judged against, and
large outputs are compared at GPU speed instead of being saved, hashed, read back and
compared on the CPU.

Per problem, the store keeps what is measured once: the physical floor's inputs (first
run) and, with a live baseline, the reference's timing. A reference that fails on the
problem's own trials fails every sample of its problem, once.
"""

from __future__ import annotations

import itertools
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.build import crash_info
from kb_eval.eval.context import EvalContext
from kb_eval.eval.correctness import tolerances
from kb_eval.isolation import run_isolated
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo
from kb_eval.timing import TimingStats


@dataclass
class ReferenceState:
    """What one problem's reference keeps across samples."""
    timing: TimingStats | None = None
    timed: bool = False
    metrics: dict | None = None  # what the physical floor needs (first run measures it)
    error: str | None = None
    detail: str | None = None
    crash: CrashInfo | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ReferenceRun:
    """One sample's reference run: what the reference showed per label, and each label's
    comparison with the candidate's output (worker.run_reference)."""
    state: ReferenceState
    seen: dict[str, dict] = field(default_factory=dict)
    diffs: dict[str, dict] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        return self.state.error


def parse_label(name: str) -> list:
    """correct_3 -> [correct, 3]; timing_7_<seed hex> -> [timing, 7, seed] (a candidate's
    timed call, with the OS-random seed its inputs came from)."""
    m = re.fullmatch(r"([a-z]+)_(\d+)(?:_([0-9a-f]{1,16}))?", name)
    if m is None:
        raise ValueError(f"not a label: {name!r}")
    return [m.group(1), int(m.group(2))] + ([int(m.group(3), 16)] if m.group(3) else [])


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        self.root = ctx.invocation_dir / "refs"
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()
        self._runs = itertools.count()

    def _state(self, problem: Problem) -> ReferenceState:
        with self._guard:
            return self._states.setdefault(problem.key, ReferenceState())

    def compare(self, problem: Problem, labels: list[str], folder: Path,
                device: str) -> ReferenceRun:
        """Run the reference on `labels` and compare with the candidate's files in
        `folder`. The first run of a problem (it also measures once-per-problem figures)
        runs alone; later ones may run side by side on several devices."""
        state = self._state(problem)
        with state.lock:
            if state.error:
                return ReferenceRun(state)
            first = state.metrics is None or (self.ctx.config.live_baseline and not state.timed)
            if first:
                return self._run(problem, state, labels, folder, device)
        return self._run(problem, state, labels, folder, device)

    def _run(self, problem: Problem, state: ReferenceState, labels: list[str], folder: Path,
             device: str) -> ReferenceRun:
        cfg = self.ctx.config
        want_timing = cfg.live_baseline and not state.timed
        atol, rtol = tolerances(cfg.precision, cfg.atol, cfg.rtol)
        payload = {"problem_code": problem.code, "device": self.ctx.torch_device(device),
                   "precision": cfg.precision, "seed": self.ctx.problem_seed(problem),
                   "labels": [parse_label(lb) for lb in labels],
                   "compare": {"folder": str(folder), "atol": atol, "rtol": rtol},
                   "timing": cfg.timing.model_dump() if want_timing else None,
                   "metrics": state.metrics is None, "floor_timing": cfg.timing.model_dump()}
        workdir = self.root / f"{problem.source.replace('/', '_')}_{problem.slug}_{next(self._runs)}"
        out = run_isolated("kb_eval.eval.worker:run_reference", payload, workdir=workdir,
                           timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                           env=self.ctx.device_env(device), prewarm=True,
                           warm_cuda=device != "cpu")
        if not cfg.keep_workdirs:
            shutil.rmtree(workdir, ignore_errors=True)
        if not out.ok:
            state.error = f"reference {out.describe()}"
            state.detail = out.output_tail[-4000:]
            if out.status != "error":
                state.crash = crash_info("reference", out)
            return ReferenceRun(state)
        result = out.result or {}
        if result.get("metrics") is not None and state.metrics is None:
            state.metrics = result["metrics"]
        if want_timing:
            state.timed = True
            state.timing = TimingStats.model_validate(result["timing"])
        return ReferenceRun(state, seen=result.get("seen", {}), diffs=result.get("diffs", {}))
