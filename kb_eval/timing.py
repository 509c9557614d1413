"""The measurement core: baseline and eval both time through `time_callable`.

CUDA: CUDA events around each call, after an L2 flush and a short GPU spin (the launch
cover) that hide the host's path to the first kernel; work left on other streams is
charged from the device-wide wait's excess. CPU: a monotonic clock. The policy (how many
calls and rounds) is kb_eval/timing_plan.py's (torch-free).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import resource
import statistics
from typing import Any, Callable, NamedTuple, Sequence

import torch

from kb_eval import clocks
# re-exported: callers import them from here
from kb_eval.timing_plan import (  # noqa: F401
    GPU_PACED_UNTIMED_MAX_MS, LAUNCH_BOUND_SHARE, MAX_ROUNDS, SLOW_CUT_MIN_ROUNDS, SLOW_CUT_MS,
    SLOW_CUT_RATIO, SLOW_SIDE_RATIO, STORED_BEFORE, UNTIMED_CALL_MAX_MS, WARMUP_MS,
    TimingSettings, TimingStats, cut_rounds, kept, method_for, paired_rounds, plan_timing,
    round_medians)

ArgsForTrial = Callable[[int], Sequence[Any]]

# Host seconds spent in each part of this process's timings (gc, draw, timed, check,
# spin, ...), for the phases child_timing_* and pair_reference_*. Never a scored time.
SPENT: collections.Counter[str] = collections.Counter()


def spent_since(before: collections.Counter[str], parts=None) -> dict[str, float]:
    """SPENT's growth since the copy `before`, by part (only `parts` when given)."""
    return {k: v - before.get(k, 0.0) for k, v in SPENT.items() if parts is None or k in parts}


@contextlib.contextmanager
def spent(part: str):
    """Add the host seconds of the block to SPENT[part]."""
    started = clocks.perf_counter()
    try:
        yield
    finally:
        SPENT[part] += clocks.perf_counter() - started


# The environment of every process that times a call, the same on both sides
# (docs/GUARANTEES.md): passive OpenMP threads use no CPU between calls (which
# eval/child/threads.py would charge); fixed malloc thresholds make both sides allocate
# alike; CUPTI torn down after a profiled call (attached, it slows every later launch).
TIMED_PROCESS_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
                     "MALLOC_TRIM_THRESHOLD_": str(1 << 30), "TEARDOWN_CUPTI": "1"}


def time_callable(fn: Callable[..., Any], settings: TimingSettings | None = None,
                  device: str | torch.device = "cpu",
                  args_for_trial: ArgsForTrial | None = None,
                  on_output: Callable[[int, Any], None] | None = None) -> TimingStats:
    """Time `fn(*args_for_trial(i))` (or `fn()`); `on_output(i, out)` sees each timed
    call's output after its timing was taken (eval uses it to re-check outputs)."""
    return TimingStats.of(*time_samples(fn, settings, device, args_for_trial, on_output))


def time_samples(fn: Callable[..., Any], settings: TimingSettings | None = None,
                 device: str | torch.device = "cpu",
                 args_for_trial: ArgsForTrial | None = None,
                 on_output: Callable[[int, Any], None] | None = None
                 ) -> tuple[list[float], float | None]:
    """`time_callable`'s calls: the kept times (ms, in call order) and the median launch
    time (None on a CPU). The baseline merges several visits' times into one statistic."""
    settings = settings or TimingSettings()
    device = torch.device(device)
    args = args_for_trial or (lambda i: ())
    for i in range(settings.warmup):
        fn(*args(-1 - i))
    n = settings.n_calls
    timer = timer_for(device, settings.flush_l2, cover_ms=settings.launch_cover_ms)
    take_launch_ms(timer)
    samples = time_calls(fn, range(n), timer, args, on_output)
    if settings.discard_first:
        samples = samples[1:]
    return samples, take_launch_ms(timer)


def time_calls(fn: Callable[..., Any], indices: Sequence[int], timer: "_CpuTimer | _CudaTimer",
               args: ArgsForTrial, on_output: Callable[[int, Any], None] | None = None,
               collect: bool = True) -> list[float]:
    """One timed call per index on `args(i)`, drawn before its clock starts; the times in
    ms. `collect`: a young-generation collection first (paired timing: before its first
    round only; docs/PERFORMANCE.md)."""
    samples, now = [], clocks.perf_counter
    if collect:
        with spent("gc"):
            gc.collect(1)
    gc.disable()  # a collection pause inside a call would be timed as the call's (timeit does the same)
    try:
        for i in indices:
            t0 = now()
            call_args = args(i)
            t1 = now()
            ms, out = timer.time_one(fn, call_args)
            t2 = now()
            samples.append(ms)
            if on_output is not None:
                on_output(i, out)
            del out, call_args
            t3 = now()
            SPENT["draw"] += t1 - t0
            SPENT["timed"] += t2 - t1
            SPENT["check"] += t3 - t2
    finally:
        gc.enable()
    return samples


_TIMERS: dict[tuple[str, bool, float], "_CudaTimer"] = {}


def timer_for(device: torch.device, flush_l2: bool = True, spin_up_s: float = 0.01,
              cover_ms: float = 0.0, first_spin_s: float = 0.03) -> "_CpuTimer | _CudaTimer":
    """The process's timer for `device`: a CUDA timer is made once (after `first_spin_s`
    of GPU work) and each later use spins the GPU up for `spin_up_s`, so a round after an
    idle wait starts at the clocks the previous one ended at."""
    if device.type != "cuda":
        return _CpuTimer()
    key = (str(device), flush_l2, cover_ms)
    if key not in _TIMERS:
        _TIMERS[key] = _CudaTimer(device, flush_l2, cover_ms, first_spin_s)
    elif spin_up_s > 0:
        _TIMERS[key]._spin_up(spin_up_s)
    return _TIMERS[key]


# A paired timing's timer is made after at least this much GPU work: its calibration
# reads the clocks; longer cost each child device time held alone (docs/PERFORMANCE.md).
ROUND_TIMER_FIRST_SPIN_S = 0.002


def round_timer(device: torch.device, settings: TimingSettings,
                busy_s: float = 0.0) -> "_CpuTimer | _CudaTimer":
    """The timer for a paired round, the same on both sides: a round starts after
    `round_spin_up_ms` of GPU work, of which `busy_s` were done already (its untimed call),
    so only the rest is spun."""
    spin_s = max(0.0, settings.round_spin_up_ms / 1e3 - busy_s)
    first_s = max(ROUND_TIMER_FIRST_SPIN_S, settings.round_spin_up_ms / 1e3)
    with spent("spin"):
        return timer_for(device, settings.flush_l2, spin_s, settings.launch_cover_ms, first_s)


class DeviceWait(NamedTuple):
    """One device-wide synchronize, as this thread lived it."""
    wall_ms: float  # how long it blocked
    cpu_ms: float  # this thread's CPU time meanwhile: a spinning wait for pending work
    #               uses it all, a wait the host caused (a sleep, a fault) does not
    preempted: bool  # an involuntary context switch happened meanwhile


def device_wait(device: torch.device) -> DeviceWait:
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    cpu0, t0 = clocks.thread_time_ns(), clocks.perf_counter()
    torch.cuda.synchronize(device)
    wall_ms = (clocks.perf_counter() - t0) * 1e3
    return DeviceWait(wall_ms, (clocks.thread_time_ns() - cpu0) / 1e6,
                      resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw != before)


def device_wait_ms(device: torch.device) -> float | None:
    """Host milliseconds a device-wide synchronize blocked (long: work pending on some
    stream); None when this thread was preempted meanwhile: then it measured the host."""
    wait = device_wait(device)
    return None if wait.preempted else wait.wall_ms


# A device-wide wait up to this long after a call charges nothing; beyond it, the excess
# is late work (an honest call's wait exceeds the calibration; docs/PERFORMANCE.md).
HONEST_WAIT_MS = 0.1

# A tiny kernel's host round trip on an idle GPU takes ~0.02 ms; behind kernels of another
# process (contexts share the GPU by time slices) it waits for that work or a slice.
QUIET_PROBE_MS = 0.25


def busy_ms_before_quiet(device: torch.device, limit_s: float = 5.0, calm: int = 3) -> float:
    """Host milliseconds until the GPU ran `calm` tiny kernels of ours in a row at an idle
    GPU's latency: how long another process's work kept it busy (a synchronize sees only
    ours). The reference server sees a stopped candidate's kernels still running so."""
    probe = torch.empty(1, device=device)
    torch.cuda.synchronize(device)  # our own work first: only another process's may remain
    t_start, fast, quiet_since = clocks.perf_counter(), 0, 0.0
    while clocks.perf_counter() - t_start < limit_s:
        t0 = clocks.perf_counter()
        probe.zero_()
        took_ms = device_wait_ms(device)
        if took_ms is None:
            continue
        if took_ms > QUIET_PROBE_MS:
            fast = 0
            continue
        quiet_since = t0 if fast == 0 else quiet_since
        fast += 1
        if fast == calm:
            return (quiet_since - t_start) * 1e3
    return (clocks.perf_counter() - t_start) * 1e3


def take_launch_ms(timer: "_CpuTimer | _CudaTimer") -> float | None:
    """The median launch time of the calls timed since the last take (None if none)."""
    launches = getattr(timer, "launch_ms", None)
    if not launches:
        return None
    median = statistics.median(launches)
    launches.clear()
    return round(median, 4)


class _CpuTimer:
    def time_one(self, fn, call_args):
        t0 = clocks.perf_counter_ns()
        out = fn(*call_args)
        return (clocks.perf_counter_ns() - t0) / 1e6, out


class _CudaTimer:
    _calibration: dict[int, tuple[float, float]] = {}
    _cycles_per_ms: dict[int, float] = {}

    def __init__(self, device: torch.device, flush_l2: bool, cover_ms: float = 0.0,
                 spin_up_s: float = 0.03):
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        torch.cuda.set_device(device)
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush_buf = (torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device=device)
                          if flush_l2 else None)
        self.start, self.end, self.after_sync = (torch.cuda.Event(enable_timing=True)
                                                 for _ in range(3))
        self.launch_ms: list[float] = []  # host time of each call's launch (take_launch_ms)
        self._spin_up(spin_up_s)
        self.latency = self._calibrate()
        self.cover_cycles = round(cover_ms * self._sleep_rate()) if cover_ms > 0 else 0

    def _spin_up(self, seconds: float = 0.03) -> None:
        """Keep the GPU busy briefly so its clocks leave idle before anything is timed,
        one zeroing at a time to end near `seconds` (docs/PERFORMANCE.md)."""
        buf = self.flush_buf if self.flush_buf is not None else torch.empty(
            1 << 26, dtype=torch.uint8, device=self.device)
        t_end = clocks.perf_counter() + seconds
        while clocks.perf_counter() < t_end:
            buf.zero_()
            torch.cuda.synchronize(self.device)

    def _calibrate(self) -> tuple[float, float]:
        """With nothing else running: the host time of a device-wide synchronize, and the
        GPU-time gap from an end event to one recorded after it (subtracted from late work)."""
        idx = self.device.index
        if idx not in self._calibration:
            probe = torch.empty(1, device=self.device)
            waits, gaps = [], []
            for _ in range(200):
                self.start.record()
                probe.zero_()
                self.end.record()
                waited = self._wait_for_end()
                self.after_sync.record()
                self.after_sync.synchronize()
                if waited is not None:  # a preempted wait measured the host, not the GPU
                    waits.append(waited)
                    gaps.append(self.end.elapsed_time(self.after_sync))
                if len(waits) == 30:
                    break
            self._calibration[idx] = (statistics.median(waits or [0.05]),
                                      statistics.median(gaps or [0.0]))
        return self._calibration[idx]

    def _sleep_rate(self) -> float:
        """GPU clock cycles per millisecond of `torch.cuda._sleep` (once per device)."""
        idx = self.device.index
        if idx not in self._cycles_per_ms:
            cycles, rates = 1_000_000, []
            for _ in range(3):
                self.start.record()
                torch.cuda._sleep(cycles)
                self.end.record()
                self.end.synchronize()
                rates.append(cycles / max(self.start.elapsed_time(self.end), 1e-3))
            self._cycles_per_ms[idx] = statistics.median(rates)
        return self._cycles_per_ms[idx]

    def _wait_for_end(self) -> float | None:
        """Wait for the end event, then for the whole device: device_wait_ms."""
        self.end.synchronize()
        return device_wait_ms(self.device)

    def _pre_queue(self) -> None:
        """GPU work (the flush, the launch cover) ahead of the start event, so that the
        host's path to the call's first kernel is not timed (docs/PERFORMANCE.md)."""
        if self.flush_buf is not None:
            self.flush_buf.zero_()
        if self.cover_cycles:
            torch.cuda._sleep(self.cover_cycles)
        elif self.flush_buf is None:
            torch.cuda._sleep(20_000)

    def time_one(self, fn, call_args):
        self._pre_queue()
        t0 = clocks.perf_counter()
        self.start.record()
        out = fn(*call_args)
        self.end.record()
        self.launch_ms.append((clocks.perf_counter() - t0) * 1e3)
        waited = self._wait_for_end()
        on_stream = self.start.elapsed_time(self.end)
        if waited is not None:
            return on_stream + self._late_work_ms(waited), out
        # A preempted wait proves nothing, so it counts as busy: a cheat never gains from
        # a loaded host, though an honest call may pay the host's delay.
        self.after_sync.record()
        self.after_sync.synchronize()
        return max(on_stream, self.start.elapsed_time(self.after_sync) - self.latency[1]), out

    def _late_work_ms(self, waited: float) -> float:
        """What a call left running on other streams: the device-wide wait's excess over an
        idle device's longest (HONEST_WAIT_MS, or 3x the calibrated wait + 0.02 ms). Only
        the excess (docs/GUARANTEES.md, the "slow state")."""
        sync_ms, _ = self.latency
        return max(0.0, waited - max(3 * sync_ms + 0.02, HONEST_WAIT_MS))
