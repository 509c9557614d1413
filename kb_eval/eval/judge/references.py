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

import contextlib
import hashlib
import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from kb_eval import clocks
from kb_eval.eval.judge.crashes import crash_info
from kb_eval.eval.schedule.context import EvalContext, is_cpu
from kb_eval.eval.wire.labels import parse_label
from kb_eval.isolation import ChildOutcome, Server
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo
from kb_eval.devlock import device_lock
from kb_eval.timing import TimingSettings, TimingStats, budgeted

if TYPE_CHECKING:
    from kb_eval.eval.schedule.exchange import Exchange


# Seconds the servers spent on the calls this thread made (a lane's thread: its current
# sample's), queueing for a server not included; the paired rounds are counted apart.
_SERVER_TIME = threading.local()
CALL_KINDS = ("plan", "estimate", "export", "exchange_free", "compare")


def take_server_seconds() -> dict[str, float]:
    """The servers' seconds for this thread's calls since the last take, as phases:
    "server" in all, "server_<kind>" per kind of call (CALL_KINDS) and, of the
    comparisons, the parts the server timed itself ("server_truth": float64 runs...)."""
    spent, _SERVER_TIME.spent = getattr(_SERVER_TIME, "spent", {}), {}
    return {k: round(v, 3) for k, v in spent.items()}


def _note_server_time(payload: dict, seconds: float, out: ChildOutcome | None) -> None:
    kind = next((k for k in CALL_KINDS if payload.get(k)), "other")
    parts = (out.result or {}).get("spent") if out is not None and out.ok else None
    spent = getattr(_SERVER_TIME, "spent", {})
    for part, s in [("server", seconds), (f"server_{kind}", seconds),
                    *((f"server_{k}", v) for k, v in (parts or {}).items()
                      if isinstance(v, (int, float)))]:
        spent[part] = spent.get(part, 0.0) + s
    _SERVER_TIME.spent = spent


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
class MemoryPlan:
    """Whether a problem can be judged on a device, from the reference's footprint
    (inputs + outputs, or the baseline's measured peak when larger) and what the device
    offers with the evaluator idle (free GPU memory after the reference server released
    what it does not keep; on a CPU, the children's memory limit)."""
    need_bytes: int | None = None
    free_bytes: int | None = None
    out_bytes: int | None = None  # one call's outputs (sizes how many are checked)
    reason: str | None = None  # set: too large to judge here
    truth_reason: str | None = None  # set: no room for the float64 truth (KernelBench rule)
    truth_bytes: int | None = None  # what computing one label's float64 truth needs

    @property
    def fits(self) -> bool:
        return self.reason is None


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):.1f} GiB"


def make_plan(sizes: dict, baseline_peak: int | None, mem_limit_mb: int | None) -> MemoryPlan:
    """The plan from the server's sizes (plan_problem) and the baseline's peak."""
    known = [sizes.get("in_bytes"), sizes.get("out_bytes"), baseline_peak]
    need = None
    if sizes.get("in_bytes") is not None:
        need = max(sizes["in_bytes"] + (sizes.get("out_bytes") or 0), baseline_peak or 0)
    elif baseline_peak:
        need = baseline_peak
    free = sizes.get("free_bytes")
    if free is None and mem_limit_mb:
        free = mem_limit_mb << 20  # a CPU: the host memory a child may use
    plan = MemoryPlan(need, free, sizes.get("out_bytes"))
    where = "free on the device" if "free_bytes" in sizes else "under the memory limit"
    if need is not None and free is not None and need > free:
        plan.reason = (f"the reference needs {gib(need)} ({'inputs ' + gib(known[0])}, "
                       f"outputs {gib(known[1])}), {gib(free)} {where}")
    elif need is not None and free is not None:
        # The float64 run of one label on top: the model widened in place (weights x
        # 8/itemsize, the narrow copy freed as it goes) and its inputs, outputs and
        # temporaries widened too; computed one label at a time and dropped.
        widen = 8 // max(1, int(sizes.get("itemsize") or 4))
        truth = need + widen * (need + (sizes.get("weights_bytes") or 0))
        if truth > free:
            plan.truth_reason = (f"no room for the float64 truth: it needs {gib(truth)}, "
                                 f"{gib(free)} {where}")
        else:
            plan.truth_bytes = truth
    return plan


@dataclass
class ReferenceRun:
    """One sample's reference run: what the reference showed per label, and each label's
    comparison with the candidate's output (reference_worker.compare_sample)."""
    state: ReferenceState
    seen: dict[str, dict] = field(default_factory=dict)
    diffs: dict[str, dict] = field(default_factory=dict)
    tolerance: dict = field(default_factory=dict)  # atol, rtol, rule, source (the server's)
    exchange_lost: bool = False  # the server was started again: the sample's buffers died

    @property
    def error(self) -> str | None:
        return self.state.error


def keep_bytes(mem_limit_mb: int | None) -> int:
    """How many bytes of reference outputs the server may keep between samples: up to
    8 GiB, and a quarter of its memory limit (outputs on a CPU count towards it)."""
    return min(8 << 30, (mem_limit_mb << 20) // 4 if mem_limit_mb else 8 << 30)


def _out_of_memory(out: ChildOutcome) -> bool:
    """A server task that ran out of device memory left the server sound (PyTorch frees
    what the task held): it keeps running, and with it the device buffers it holds for
    the other samples in flight. Ended instead, each of those samples lost its outputs
    (`exchange_lost`), and on the H100 their retries, in flight together again, met the
    same shortage: seven of KernelBench level 1's copies were `eval_error`."""
    return "OutOfMemoryError" in (out.error or "")


class ServerTurns:
    """One call at a time on a device's server, and the calls that start a sample (its
    plan, the estimate, its output buffers) or time one (a paired round) before those
    that end one (a comparison, freeing buffers). When a timing step lets go of the
    device, the finished samples' comparisons and the next samples' buffers all wait for
    the server: on the H100 (100 cached CUDA candidates, depth 3) the buffers came after
    the comparisons, so the next children started late and missed the device's shared
    turn, which the first child ready to time closes (devlock.py): 2.2 timing steps per
    turn with three samples in flight. Ending calls wait only while starting ones are queued, and
    those are bounded by the samples in flight."""

    FIRST = ("plan", "estimate", "export", "time_calls")

    def __init__(self):
        self.cond = threading.Condition()
        self.busy = False
        self.first_waiting = 0

    @contextlib.contextmanager
    def held(self, payload: dict) -> Iterator[None]:
        first = any(payload.get(k) for k in self.FIRST)
        with self.cond:
            self.first_waiting += first
            self.cond.wait_for(lambda: not self.busy and (first or not self.first_waiting))
            self.first_waiting -= first
            self.busy = True
        try:
            yield
        finally:
            with self.cond:
                self.busy = False
                self.cond.notify_all()


class KeptSizes:
    """Each problem's sizes for the memory plan (the bytes of its inputs, outputs and
    weights: reference_worker.plan_problem), kept in the cache across runs, by the
    problem's code, the precision and the toolchain. They come from a forward on the
    meta device, whose first op imports torch._dynamo: a run whose problems were all
    planned before starts judging without waiting for that (on the H100, about half of
    the ~8 s before a warm run's first plan). Sizes that did not come out whole (an op
    without a meta kernel, a forward over its time bound) are not kept. Like the build
    cache, trusted across runs (docs/GUARANTEES.md): a file that does not read back as
    sizes is ignored."""

    FIELDS = ("in_bytes", "out_bytes", "weights_bytes", "itemsize")

    def __init__(self, folder: Path, fingerprint: str):
        self.folder, self.fingerprint = folder, fingerprint

    def _path(self, code: str, precision: str) -> Path:
        key = hashlib.sha256("\0".join(["plan-1", self.fingerprint, precision, code])
                             .encode()).hexdigest()
        return self.folder / f"{key}.json"

    def get(self, code: str, precision: str) -> dict | None:
        try:
            sizes = json.loads(self._path(code, precision).read_text())
        except (OSError, ValueError):
            return None
        ok = (isinstance(sizes, dict) and set(sizes) == set(self.FIELDS)
              and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                      for v in sizes.values()))
        return sizes if ok else None

    def put(self, code: str, precision: str, plan: dict) -> None:
        sizes = {k: plan.get(k) for k in self.FIELDS}
        if plan.get("meta_error") or not all(isinstance(v, int) for v in sizes.values()):
            return
        path = self._path(code, precision)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps(sizes))
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs the next run the forward


class ReferenceStore:
    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        root = ctx.invocation_dir / "refs"
        self.servers = {d: Server("kb_eval.eval.judge.reference_worker:compare_sample",
                                  ctx.device_env(d), root / d.replace("/", "_"),
                                  warm_cuda=not is_cpu(d), survives=_out_of_memory)
                        for d in ctx.devices}
        for server in self.servers.values():
            server.start()  # imports torch while the first builds run
        self._states: dict[str, ReferenceState] = {}
        self._guard = threading.Lock()
        # A server runs one call at a time; several lanes of a device share it.
        self._server_locks = {d: ServerTurns() for d in ctx.devices}
        self._others: dict[str, int] = {}  # device memory not ours, at its least (_idle_free)
        self._device_floors: dict[str, dict] = {}  # device -> device_floor's figures
        self._floor_locks = {d: threading.Lock() for d in ctx.devices}
        self.sizes = KeptSizes(ctx.config.cache_dir / "plans", ctx.fingerprint)

    def _state(self, problem: Problem) -> ReferenceState:
        with self._guard:
            return self._states.setdefault(problem.key, ReferenceState())

    def plan(self, problem: Problem, device: str, baseline_peak: int | None = None,
             drop: bool = False) -> MemoryPlan:
        """The problem's memory plan on `device` (measured once per problem; `drop`
        measures again after the server dropped everything it keeps)."""
        state = self._state(problem)
        with state.lock:
            if state.plan is not None and not drop:
                return state.plan
            cfg = self.ctx.config
            kept = self.sizes.get(problem.code, cfg.precision)
            payload = {"plan": True, "drop": drop, "problem_code": problem.code,
                       "device": self.ctx.torch_device(device), "precision": cfg.precision,
                       "sizes": kept}
            out = self._call(device, payload)
            sizes = self._idle_free(device, (out.result or {}) if out.ok else {})
            if kept is None and out.ok:
                self.sizes.put(problem.code, cfg.precision, sizes)
            state.plan = make_plan(sizes, baseline_peak,
                                   cfg.mem_limit_mb if is_cpu(device) else None)
            if state.plan.reason and not drop:  # one line per problem; the run goes on
                print(f"kb_eval: {problem.key} ({problem.name}) is too large to judge on "
                      f"{device}: {state.plan.reason}", file=sys.stderr)
            return state.plan

    def _idle_free(self, device: str, sizes: dict) -> dict:
        """`sizes` with `free_bytes` as the device offers it with the evaluator idle: what
        is free now plus what other samples in flight hold (their children, the buffers
        exported for them). Memory not the server's own is taken as it was when it was
        least (the first plan of a run comes before any child starts): at lane depth 3 on
        the H100, neighbours holding memory at plan time sent 12 GiB KernelBench problems'
        outputs through files instead of device buffers (25 s a sample instead of 2.6 s)
        and could have cost a problem its float64 truth."""
        total, free = sizes.get("total_bytes"), sizes.get("free_bytes")
        reserved = sizes.get("reserved_bytes")
        if total is None or free is None or reserved is None:
            return sizes
        with self._guard:
            others = min(total - free - reserved, self._others.get(device, total))
            self._others[device] = others
        return {**sizes, "free_bytes": max(free, total - others - reserved)}

    def sample_timing(self, problem: Problem, device: str) -> TimingSettings:
        """The timing settings of a sample of `problem`: the run's, with the timed calls
        cut to the settings' budget at the reference's speed (timing.budgeted), which the
        server estimates once per problem (a failed estimate: the run's settings)."""
        settings = self.ctx.config.timing
        if budgeted(settings, math.inf).trials == settings.trials:
            return settings  # nothing to cut (no budget, or too few calls): no estimate
        state = self._state(problem)
        with state.lock:
            if not state.estimated:
                cfg = self.ctx.config
                out = self._call(device, {
                    "estimate": True, "problem_code": problem.code,
                    "device": self.ctx.torch_device(device), "precision": cfg.precision,
                    "seed": self.ctx.problem_seed(problem), "baseline_mode": cfg.baseline_mode})
                ms, launch = ((out.result or {}).get(k) if out.ok else None
                              for k in ("ms", "launch_ms"))
                state.call_ms = float(ms) if isinstance(ms, (int, float)) else None
                state.launch_ms = float(launch) if isinstance(launch, (int, float)) else None
                state.estimated = True
            return budgeted(settings, state.call_ms, state.launch_ms)

    def call_ms(self, problem: Problem) -> float | None:
        """The reference's call time as sample_timing estimated it (None: not estimated)."""
        return self._state(problem).call_ms

    def export(self, device: str, key: str, n: int, nbytes: int,
               at_least: int | None = None) -> dict | None:
        """`n` buffers of `nbytes` on `device` for one sample's outputs (wire/device.py),
        or as many as fit but no fewer than `at_least`: {"handles", "bytes"} for the
        child's payload, or None (files then) when the server could not allocate them."""
        spec = {"key": key, "n": n, "bytes": nbytes, "at_least": at_least}
        out = self._call(device, {"export": spec, "device": self.ctx.torch_device(device)})
        if out.ok and (out.result or {}).get("short"):
            # the server gives back what it keeps, then makes what fits: in a shared turn,
            # never beside a timing step (its reference rounds keep theirs to the end)
            out = self._call(device, {"export": {**spec, "give_back": True},
                                      "device": self.ctx.torch_device(device)})
        return out.result if out.ok and (out.result or {}).get("handles") else None

    def free_exchange(self, device: str, key: str) -> None:
        """The sample's buffers freed (a comparison frees them itself)."""
        self._call(device, {"exchange_free": key, "device": self.ctx.torch_device(device)})

    def compare(self, problem: Problem, labels: list[str], folder: Path,
                device: str, exchange: Exchange | None = None,
                paired: bool = False) -> ReferenceRun:
        """Run the reference on `labels` and compare with the candidate's files in
        `folder` (and the buffers exported under the key `exchange`, then freed). The
        first run of a problem (it also measures once-per-problem figures) is the
        problem's only one in flight; later ones may run side by side on several
        devices. `paired`: the sample's timing timed the reference in rounds beside it, so
        a live baseline needs no timing here."""
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
        """Whether this comparison also times the reference alone, once per problem: for a
        live baseline, unless the sample's paired rounds already timed the reference
        (that was a second timing of 100 calls per problem, kept only for the unpaired);
        a compiled baseline is built and timed here all the same, never inside a
        candidate's timing step, where its compile would run on the candidate's clock."""
        cfg = self.ctx.config
        if not cfg.live_baseline or state.timed:
            return False
        return not paired or cfg.baseline_mode != "eager"

    def _run(self, problem: Problem, state: ReferenceState, labels: list[str], folder: Path,
             device: str, exchange: Exchange | None = None,
             want_timing: bool = False) -> ReferenceRun:
        cfg = self.ctx.config
        if exchange is not None:
            exchange.sent = True  # the server frees the buffers once it compared
        truth = state.plan is None or state.plan.truth_reason is None
        payload = {"problem_code": problem.code, "device": self.ctx.torch_device(device),
                   "precision": cfg.precision, "seed": self.ctx.problem_seed(problem),
                   "labels": [parse_label(lb) for lb in labels],
                   "compare": {"folder": str(folder), "atol": cfg.atol, "rtol": cfg.rtol,
                               "rule": cfg.tolerance, "truth": truth,
                               "exchange": exchange.key if exchange else None},
                   "timing": cfg.timing.model_dump() if want_timing else None,
                   "baseline_mode": cfg.baseline_mode,
                   "metrics": state.metrics is None,
                   "count_launches": cfg.counts_launches(self.ctx.device_kind),
                   "keep_bytes": keep_bytes(cfg.mem_limit_mb)}
        out = self._call(device, payload)
        if not out.ok:
            # An exception of the reference's own code on its own trials fails the
            # problem; a server that died or was killed is the evaluator's fault.
            state.error = f"reference {out.describe()}"
            state.detail = out.output_tail[-4000:]
            state.harness = out.status != "error" or "OutOfMemoryError" in (out.error or "")
            if out.status != "error":
                state.crash = crash_info("reference", out)
            return ReferenceRun(state)
        result = out.result or {}
        if result.get("exchange_lost"):
            return ReferenceRun(state, exchange_lost=True)
        if result.get("metrics") is not None and state.metrics is None:
            state.metrics = self._with_device_floor(result["metrics"], device)
        if want_timing:
            state.timed = True
            state.timing_error = result.get("timing_error")
            if state.timing_error is None:
                state.timing = TimingStats.model_validate(result["timing"])
        return ReferenceRun(state, seen=result.get("seen", {}), diffs=result.get("diffs", {}),
                            tolerance=result.get("tolerance") or {})

    def _with_device_floor(self, metrics: dict, device: str) -> dict:
        """A problem's floor metrics with the device's own figures (device_floor): taken
        once per device and run, in a call that holds the device alone, so a problem's
        first comparison needs it only shared."""
        if "error" in metrics:
            return metrics
        with self._floor_locks[device]:
            if device not in self._device_floors:
                out = self._call(device, {"device_floor": self.ctx.config.timing.model_dump(),
                                          "device": self.ctx.torch_device(device)})
                figures = (out.result or {}) if out.ok else {"error": out.describe()}
                self._device_floors[device] = figures
        figures = self._device_floors[device]
        if "error" in figures:  # the floor goes on with the problem's bytes alone
            return {**metrics, "device_floor_error": figures["error"]}
        return {**metrics, **figures}

    def time_rounds(self, problem: Problem, device: str, rounds: list[int], ks: list[int],
                    settings: TimingSettings) -> list[dict]:
        """The reference's rounds `rounds` of a paired timing (schedule/pairing.py), back
        to back in one server call, with `ks[i]` timed calls in round `rounds[i]`. For
        each: its calls' times ("ms"), how long the GPU was busy with another process's
        work before them ("busy_ms", the first round only) and the calls' median launch
        time ("launch_ms", GPU). Not under the device lock: the sample's candidate child
        holds it alone for its whole timing step, rounds of both sides included."""
        cfg, server = self.ctx.config, self.servers[device]
        payload = {"time_calls": True, "rounds": rounds, "problem_code": problem.code,
                   "device": self.ctx.torch_device(device), "precision": cfg.precision,
                   "seed": self.ctx.problem_seed(problem), "timing": settings.model_dump(),
                   "baseline_mode": cfg.baseline_mode}
        with self._server_locks[device].held(payload):
            out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        answers = (out.result or {}).get("rounds") if out.ok else None
        if not isinstance(answers, list) or len(answers) != len(rounds):
            why = (out.result or {}).get("error") if out.ok else None
            raise RuntimeError(f"reference rounds {rounds}: {why or out.describe()}")
        return [self._round(r, k, answer) for r, k, answer in zip(rounds, ks, answers)]

    @staticmethod
    def _round(r: int, k: int, answer: dict) -> dict:
        """One round's answer, checked: `k` times."""
        ms = answer.get("ms")
        if not isinstance(ms, list) or len(ms) != k:
            raise RuntimeError(f"reference round {r}: {answer.get('error') or 'no times'}")
        launch = answer.get("launch_ms")
        return {"ms": [float(x) for x in ms], "busy_ms": float(answer.get("busy_ms") or 0),
                "launch_ms": None if launch is None else float(launch),
                "spent": dict(answer.get("spent") or {})}

    def server_pid(self, device: str) -> int | None:
        """The pid of `device`'s server, if it is running."""
        server = self.servers.get(device)
        return None if server is None or server.child is None else server.child.proc.pid

    def server_pids(self) -> set[int]:
        """The servers' processes: never stopped by a paired timing."""
        return {pid for device in self.servers if (pid := self.server_pid(device)) is not None}

    def _call(self, device: str, payload: dict) -> ChildOutcome:
        """One server call, under the device's timing lock (kb_eval/devlock.py): alone
        when it times something (a live baseline, the device's floor figures), else
        shared with the candidate children's untimed work, except an export that gives
        nothing back, which launches nothing (wire/device.Exported) and so may run beside
        a timed call: the next samples' buffers are ready when the device's next shared
        turn comes, their children waiting for it, instead of being made in that turn,
        after it. The device lock is taken before the server's: a paired-timing round
        (time_rounds, inside a candidate's timing step) must get the server while another
        lane waits for the device."""
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
                _note_server_time(payload, clocks.monotonic() - started, out)

    def _call_server(self, server: Server, payload: dict) -> ChildOutcome:
        cfg = self.ctx.config
        out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        if out.status in ("crashed", "no_result"):  # died, not failed: once more, fresh
            out = server.call(payload, timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        return out

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
