"""Reference outputs: computed in their own child, cached per problem/seed/precision.

Folder: `<cache>/runs/<invocation>/refs/<problem-slug>/<precision>/<seed-tag>/<label>.pt`,
outside every candidate's workdir. A problem's reference runs lazily, the first time one of
its candidates has run (the first candidate of a problem never runs while that problem's
reference outputs exist on disk), and again only for labels it has not computed yet (the
timed calls a candidate's re-check picked). With a live baseline the first reference run
also times the model. A reference that fails fails every sample of its problem, once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.build import crash_info
from kb_eval.eval.context import EvalContext
from kb_eval.isolation import run_isolated
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo
from kb_eval.timing import TimingStats


@dataclass
class ReferenceState:
    folder: Path
    labels: set[str] = field(default_factory=set)
    seen: dict[str, dict] = field(default_factory=dict)
    timing: TimingStats | None = None
    timed: bool = False
    error: str | None = None
    detail: str | None = None
    crash: CrashInfo | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def parse_label(name: str) -> tuple[str, int]:
    kind, _, i = name.rpartition("_")
    return kind, int(i)


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        self.root = ctx.invocation_dir / "refs"
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()

    def _state(self, problem: Problem) -> ReferenceState:
        with self._guard:
            if problem.key not in self._states:
                folder = (self.root / problem.source.replace("/", "_") / problem.slug /
                          self.ctx.config.precision / self.ctx.seed_tag(problem))
                self._states[problem.key] = ReferenceState(folder=folder)
            return self._states[problem.key]

    def ensure(self, problem: Problem, labels: list[str], device: str) -> ReferenceState:
        """Outputs for `labels` exist in the returned state's folder (unless it has error)."""
        state = self._state(problem)
        with state.lock:
            missing = [lb for lb in labels if lb not in state.labels]
            want_timing = self.ctx.config.live_baseline and not state.timed
            if state.error or not (missing or want_timing):
                return state
            self._compute(problem, state, missing, want_timing, device)
            return state

    def _compute(self, problem: Problem, state: ReferenceState, labels: list[str],
                 want_timing: bool, device: str) -> None:
        cfg = self.ctx.config
        payload = {"problem_code": problem.code, "device": self.ctx.torch_device(device),
                   "precision": cfg.precision, "seed": self.ctx.problem_seed(problem),
                   "labels": [parse_label(lb) for lb in labels],
                   "timing": cfg.timing.model_dump() if want_timing else None}
        state.folder.mkdir(parents=True, exist_ok=True)
        out = run_isolated("kb_eval.eval.worker:run_reference", payload, workdir=state.folder,
                           timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                           env={**self.ctx.device_env(device)}, prewarm=True)
        if not out.ok:
            state.error = f"reference {out.describe()}"
            state.detail = out.output_tail[-4000:]
            if out.status != "error":
                state.crash = crash_info("reference", out)
            return
        result = out.result or {}
        state.labels.update(labels)
        state.seen.update(result.get("seen", {}))
        if want_timing:
            state.timed = True
            state.timing = TimingStats.model_validate(result["timing"])
