"""The reference side of a sample, from the parent: one trusted server per device.

Each device gets an `isolation.Server` running kb_eval/eval/judge/reference_worker.py: a
long-lived child where no candidate code ever runs. Per sample it runs `Model` on the
sample's labels (the correctness trials, the shape probe, the timed calls the candidate
reported with their seeds) and compares each output with the candidate's file at once, on
the device. Reference outputs never touch the disk, so nothing a candidate writes can
change what it is judged against, and the server keeps each problem's model and fixed
outputs, so a sample costs only its own timed calls' references.

Per problem, the store keeps what is measured once: the physical floor's inputs (first
run) and, with a live baseline, the reference's timing. A reference that fails on the
problem's own trials fails every sample of its problem, once. A server that dies without
an answer (killed from outside, say) is started again and asked once more.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.judge.crashes import crash_info
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.judge.correctness import tolerances
from kb_eval.eval.wire.labels import parse_label
from kb_eval.isolation import ChildOutcome, Server
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
    comparison with the candidate's output (reference_worker.compare_sample)."""
    state: ReferenceState
    seen: dict[str, dict] = field(default_factory=dict)
    diffs: dict[str, dict] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        return self.state.error


def keep_bytes(mem_limit_mb: int | None) -> int:
    """How many bytes of reference outputs the server may keep between samples: up to
    8 GiB, and a quarter of its memory limit (outputs on a CPU count towards it)."""
    return min(8 << 30, (mem_limit_mb << 20) // 4 if mem_limit_mb else 8 << 30)


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        root = ctx.invocation_dir / "refs"
        self.servers = {d: Server("kb_eval.eval.judge.reference_worker:compare_sample",
                                  ctx.device_env(d), root / d.replace("/", "_"),
                                  warm_cuda=d != "cpu") for d in ctx.devices}
        for server in self.servers.values():
            server.start()  # imports torch while the first builds run
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()

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
                   "metrics": state.metrics is None, "floor_timing": cfg.timing.model_dump(),
                   "keep_bytes": keep_bytes(cfg.mem_limit_mb)}
        out = self._call(device, payload)
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

    def _call(self, device: str, payload: dict) -> ChildOutcome:
        cfg, server = self.ctx.config, self.servers[device]
        out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        if out.status in ("crashed", "no_result"):  # died, not failed: once more, fresh
            out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        return out

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
