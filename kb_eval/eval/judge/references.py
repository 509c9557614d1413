"""The reference side of a sample, from the parent: one trusted server per device
(judge/reference_worker.py), where no candidate code runs, runs `Model` on a sample's labels
and compares each output with the candidate's file on the device; reference outputs never
touch the disk. Per problem the store keeps what is measured once (floor inputs, a live
baseline's timing); a server that dies without an answer is started again and asked once more.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kb_eval import clocks
from kb_eval.eval.judge.crashes import crash_info
from kb_eval.eval.judge.server_turns import ServerTurns, note_server_time, out_of_memory
# re-exported: schedule/sample.py imports it from here
from kb_eval.eval.judge.server_turns import take_server_seconds  # noqa: F401
from kb_eval.eval.schedule.context import EvalContext, is_cpu
from kb_eval.eval.schedule.memplan import IdleMemory, KeptSizes, MemoryPlan, keep_bytes, make_plan
from kb_eval.eval.wire.labels import parse_label
from kb_eval.eval.wire.reference import (
    CompareReply, CompareRequest, CompareSpec, DeviceFloorReply, DeviceFloorRequest,
    EstimateReply, EstimateRequest, ExportReply, ExportRequest, ExportSpec, FreeRequest,
    PlanReply, PlanRequest, RoundAnswer, RoundsReply, RoundsRequest, parse_reply)
from kb_eval.isolation import ChildOutcome, Server
from kb_eval.peaks import PeaksFile, peaks_path, read_peaks, write_peaks
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo
from kb_eval.devlock import device_lock
from kb_eval.timing import TimingSettings, TimingStats, plan_timing

if TYPE_CHECKING:
    from kb_eval.eval.schedule.exchange import Exchange


@dataclass
class ReferenceState:
    """What one problem's reference keeps across samples."""
    timing: TimingStats | None = None
    timed: bool = False
    metrics: dict | None = None  # what the physical floor needs (first run measures it)
    error: str | None = None
    detail: str | None = None
    crash: CrashInfo | None = None
    harness: bool = False  # the error is the server's (died, killed), not the reference's
    timing_error: str | None = None  # live baseline: why the compiler could not take it
    plan: MemoryPlan | None = None
    call_ms: float | None = None  # a rough reference call (sizes the timed calls)
    launch_ms: float | None = None  # of it, until the call returned (GPU: launch-bound?)
    estimated: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ReferenceRun:
    """One sample's reference run: what the reference showed per label, and each label's
    comparison with the candidate's output (judge/compare.py)."""
    state: ReferenceState
    seen: dict[str, dict] = field(default_factory=dict)
    diffs: dict[str, dict] = field(default_factory=dict)
    tolerance: dict = field(default_factory=dict)  # atol, rtol, rule, source (the server's)
    exchange_lost: bool = False  # the server was started again: the sample's buffers died

    @property
    def error(self) -> str | None:
        return self.state.error


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        root = ctx.invocation_dir / "refs"
        self.servers = {d: Server("kb_eval.eval.judge.reference_worker:compare_sample",
                                  ctx.device_env(d, sandboxed=False), root / d.replace("/", "_"),
                                  warm_cuda=not is_cpu(d), survives=out_of_memory)
                        for d in ctx.devices}
        for server in self.servers.values():
            server.start()  # imports torch while the first builds run
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()
        # A server runs one call at a time; several lanes of a device share it.
        self._server_locks = {d: ServerTurns() for d in ctx.devices}
        self._idle = IdleMemory()
        self._device_floors: dict[str, dict] = {}  # device -> device_floor's figures
        self._floor_locks = {d: threading.Lock() for d in ctx.devices}
        self.sizes = KeptSizes(ctx.config.cache_dir / "plans", ctx.fingerprint)

    def _state(self, problem: Problem) -> ReferenceState:
        with self._guard:
            return self._states.setdefault(problem.key, ReferenceState())

    def plan(self, problem: Problem, device: str, baseline_peak: int | None = None,
             drop: bool = False) -> MemoryPlan:
        """The problem's memory plan on `device`, measured once (`drop`: again, after the
        server dropped everything it keeps)."""
        state = self._state(problem)
        with state.lock:
            if state.plan is not None and not drop:
                return state.plan
            cfg = self.ctx.config
            kept = self.sizes.get(problem.code, cfg.precision)
            out = self._call(device, PlanRequest(
                drop=drop, problem_code=problem.code, device=self.ctx.torch_device(device),
                precision=cfg.precision, sizes=kept).model_dump())
            answer = (parse_reply(PlanReply, out.result).model_dump(exclude_unset=True)
                      if out.ok else {})
            sizes = self._idle.free(device, answer)
            if kept is None and out.ok:
                self.sizes.put(problem.code, cfg.precision, sizes)
            state.plan = make_plan(sizes, baseline_peak,
                                   cfg.mem_limit_mb if is_cpu(device) else None)
            if state.plan.reason and not drop:  # one line per problem; the run goes on
                print(f"kb_eval: {problem.key} ({problem.name}) is too large to judge on "
                      f"{device}: {state.plan.reason}", file=sys.stderr)
            return state.plan

    def sample_timing(self, problem: Problem, device: str) -> TimingSettings:
        """The run's timing settings, the timed calls cut to the budget at the reference's
        speed (timing.plan_timing), estimated once per problem."""
        settings = self.ctx.config.timing
        if plan_timing(settings, reference_ms=math.inf).trials == settings.trials:
            return settings  # nothing to cut (no budget, or too few calls): no estimate
        state = self._state(problem)
        with state.lock:
            if not state.estimated:
                cfg = self.ctx.config
                out = self._call(device, EstimateRequest(
                    problem_code=problem.code, device=self.ctx.torch_device(device),
                    precision=cfg.precision, seed=self.ctx.problem_seed(problem),
                    baseline_mode=cfg.baseline_mode).model_dump())
                answer = parse_reply(EstimateReply, out.result) if out.ok else EstimateReply()
                state.call_ms, state.launch_ms = answer.ms, answer.launch_ms
                state.estimated = True
            return plan_timing(settings, reference_ms=state.call_ms,
                               launch_ms=state.launch_ms)

    def pace(self, problem: Problem) -> tuple[float | None, float | None]:
        """The reference's call and launch time as sample_timing estimated them (or None)."""
        state = self._state(problem)
        return state.call_ms, state.launch_ms

    def export(self, device: str, key: str, n: int, nbytes: int,
               at_least: int | None = None) -> dict | None:
        """`n` buffers of `nbytes` (or as many as fit, >= `at_least`) for one sample's
        outputs (wire/device.py): {"handles", "bytes"}, or None (files then)."""
        spec = ExportSpec(key=key, n=n, bytes=nbytes, at_least=at_least)
        answer = self._export(device, spec)
        if answer is not None and answer.short:
            # give back what the server keeps, in a shared turn (never beside a timing step)
            answer = self._export(device, spec.model_copy(update={"give_back": True}))
        return (answer.model_dump(exclude_unset=True)
                if answer is not None and answer.handles else None)

    def _export(self, device: str, spec: ExportSpec) -> ExportReply | None:
        out = self._call(device, ExportRequest(export=spec,
                                               device=self.ctx.torch_device(device)).model_dump())
        return parse_reply(ExportReply, out.result) if out.ok else None

    def free_exchange(self, device: str, key: str) -> None:
        """The sample's buffers freed (a comparison frees them itself)."""
        self._call(device, FreeRequest(exchange_free=key,
                                       device=self.ctx.torch_device(device)).model_dump())

    def compare(self, problem: Problem, labels: list[str], folder: Path,
                device: str, exchange: Exchange | None = None,
                paired: bool = False) -> ReferenceRun:
        """Run the reference on `labels` and compare with the candidate's files in `folder`
        (and `exchange`'s buffers). A problem's first run (it measures the once-per-problem
        figures) runs alone. `paired`: the reference was timed in rounds already."""
        state = self._state(problem)
        with state.lock:
            if state.error and state.harness:  # the server died last time: try again
                state.error = state.detail = state.crash = None
                state.harness = False
            if state.error:
                return ReferenceRun(state)
            want_timing = self._wants_timing(state, paired)
            if state.metrics is None or want_timing:
                return self._run(problem, state, labels, folder, device, exchange, want_timing)
        return self._run(problem, state, labels, folder, device, exchange, False)

    def _wants_timing(self, state: ReferenceState, paired: bool) -> bool:
        """Whether this comparison also times a live baseline, once per problem. A compiled
        baseline is timed here even when paired: its compile must not run on the
        candidate's clock."""
        cfg = self.ctx.config
        if not cfg.live_baseline or state.timed:
            return False
        return not paired or cfg.baseline_mode != "eager"

    def _run(self, problem: Problem, state: ReferenceState, labels: list[str], folder: Path,
             device: str, exchange: Exchange | None = None,
             want_timing: bool = False) -> ReferenceRun:
        cfg = self.ctx.config
        if exchange is not None:
            exchange.sent = True
        truth = state.plan is None or state.plan.truth_reason is None
        request = CompareRequest(
            problem_code=problem.code, device=self.ctx.torch_device(device),
            precision=cfg.precision, seed=self.ctx.problem_seed(problem),
            labels=[parse_label(lb) for lb in labels],
            compare=CompareSpec(folder=str(folder), atol=cfg.atol, rtol=cfg.rtol,
                                rule=cfg.tolerance, truth=truth,
                                exchange=exchange.key if exchange else None),
            timing=cfg.timing if want_timing else None, baseline_mode=cfg.baseline_mode,
            metrics=state.metrics is None,
            count_launches=cfg.counts_launches(self.ctx.device_kind),
            keep_bytes=keep_bytes(cfg.mem_limit_mb))
        out = self._call(device, request.model_dump())
        if not out.ok:
            # the reference's own exception fails the problem; a dead server is ours
            state.error = f"reference {out.describe()}"
            state.detail = out.output_tail[-4000:]
            state.harness = out.status != "error" or "OutOfMemoryError" in (out.error or "")
            if out.status != "error":
                state.crash = crash_info("reference", out)
            return ReferenceRun(state)
        result = parse_reply(CompareReply, out.result)
        if result.exchange_lost:
            return ReferenceRun(state, exchange_lost=True)
        if result.metrics is not None and state.metrics is None:
            state.metrics = self._with_device_floor(
                result.metrics.model_dump(exclude_unset=True), device)
        if want_timing:
            state.timed = True
            state.timing_error = result.timing_error
            if state.timing_error is None:
                state.timing = result.timing
        return ReferenceRun(state, seen=result.seen, diffs=result.diffs,
                            tolerance=result.tolerance)

    def _with_device_floor(self, metrics: dict, device: str) -> dict:
        """A problem's floor metrics with the device's figures, taken once per device in a
        call that holds the device alone."""
        if "error" in metrics:
            return metrics
        with self._floor_locks[device]:
            if device not in self._device_floors:
                known = read_peaks(peaks_path(self.ctx.config.results_dir,
                                              self.ctx.hardware.slug), self.ctx.hardware)
                out = self._call(device, DeviceFloorRequest(
                    device_floor=self.ctx.config.timing, device=self.ctx.torch_device(device),
                    peaks=known is None).model_dump())
                figures = (parse_reply(DeviceFloorReply, out.result).model_dump(
                    exclude_unset=True) if out.ok else {"error": out.describe()})
                self._device_floors[device] = self._with_peaks(figures, known)
        figures = self._device_floors[device]
        if "error" in figures:  # the floor goes on with the problem's bytes alone
            return {**metrics, "device_floor_error": figures["error"],
                    **{k: v for k, v in figures.items() if k == "peaks"}}
        return {**metrics, **figures}

    def _with_peaks(self, figures: dict, known: PeaksFile | None) -> dict:
        """The device's figures with the machine's peaks: the file's, or those just measured
        (then written)."""
        measured = figures.pop("peaks_measured", None)
        if known is None and isinstance(measured, dict):
            known = write_peaks(self.ctx.config.results_dir, measured, self.ctx.hardware)
        return {**figures, "peaks": known.model_dump(mode="json")} if known else figures

    def time_rounds(self, problem: Problem, device: str, rounds: list[int], ks: list[int],
                    settings: TimingSettings) -> list[dict]:
        """The reference's `rounds` of a paired timing in one server call, `ks[i]` calls in
        round `rounds[i]`: {"ms", "busy_ms", "launch_ms", "spent"} each. Not under the device
        lock: the candidate child holds it for its whole timing step."""
        cfg, server = self.ctx.config, self.servers[device]
        payload = RoundsRequest(
            rounds=rounds, problem_code=problem.code, device=self.ctx.torch_device(device),
            precision=cfg.precision, seed=self.ctx.problem_seed(problem), timing=settings,
            baseline_mode=cfg.baseline_mode).model_dump()
        with self._server_locks[device].held(payload):
            out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        answer = parse_reply(RoundsReply, out.result) if out.ok else RoundsReply()
        if answer.rounds is None or len(answer.rounds) != len(rounds):
            raise RuntimeError(f"reference rounds {rounds}: {answer.error or out.describe()}")
        return [self._round(r, k, a) for r, k, a in zip(rounds, ks, answer.rounds)]

    @staticmethod
    def _round(r: int, k: int, answer: RoundAnswer) -> dict:
        if answer.ms is None or len(answer.ms) != k:
            raise RuntimeError(f"reference round {r}: {answer.error or 'no times'}")
        return {"ms": list(answer.ms), "busy_ms": answer.busy_ms,
                "launch_ms": answer.launch_ms, "spent": dict(answer.spent)}

    def server_pid(self, device: str) -> int | None:
        server = self.servers.get(device)
        return None if server is None or server.child is None else server.child.proc.pid

    def server_pids(self) -> set[int]:
        """The servers' processes: never stopped by a paired timing."""
        return {pid for device in self.servers if (pid := self.server_pid(device)) is not None}

    def _call(self, device: str, payload: dict) -> ChildOutcome:
        """One server call under the device lock (kb_eval/devlock.py): exclusive when it
        times something, shared otherwise; an export that gives nothing back launches
        nothing and takes no lock. The device lock is taken before the server's, so a
        paired round can get the server while another lane waits for the device."""
        beside = payload.get("export") and not payload["export"].get("give_back")
        mode = ("exclusive" if payload.get("timing") or payload.get("device_floor")
                else None if beside else "shared")
        lock = (device_lock(self.ctx.lock_path(device), mode) if mode
                else contextlib.nullcontext())
        with lock, self._server_locks[device].held(payload):
            started, out = clocks.monotonic(), None
            try:
                out = self._call_server(self.servers[device], payload)
                return out
            finally:
                note_server_time(payload, clocks.monotonic() - started, out)

    def _call_server(self, server: Server, payload: dict) -> ChildOutcome:
        cfg = self.ctx.config
        out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        if out.status in ("crashed", "no_result"):  # died, not failed: once more
            out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        return out

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
