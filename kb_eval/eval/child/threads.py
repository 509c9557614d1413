"""Work a candidate's own threads do outside its timed calls (in the candidate's child).

By per-thread CPU clocks: `Ledger.drain` holds a timed call open while the candidate's
threads still use CPU; `Ledger` charges CPU spent between calls (less ours) to them
(the parent flags `work_outside_call`). On a GPU the device must be idle when a call
begins, judged by the CPU spent spinning in a synchronize (`busy`), not wall time.
"""

from __future__ import annotations

import ctypes
import os

import torch

from kb_eval import clocks
from kb_eval.timing import DeviceWait, device_wait

TASKS = "/proc/self/task"
QUIET_NS = 20_000  # a thread that used less CPU than this over a poll is idle
POLL_S = 50e-6
DRAIN_MAX_S = 2.0
BUSY_WAIT_MS = 0.5  # a device sync at a call's start that blocks longer: work was pending
# the driver, bound before candidate code loads
try:
    _CUDA: ctypes.CDLL | None = ctypes.CDLL("libcuda.so.1")
except OSError:
    _CUDA = None
SCHED_MASK, SPINNING_MODES = 0x07, (0x00, 0x01)  # CU_CTX_SCHED_AUTO, CU_CTX_SCHED_SPIN


def waits_spinning() -> bool:
    """Whether this thread's CUDA context waits for the device by spinning on the CPU."""
    flags = ctypes.c_uint()
    if _CUDA is None or _CUDA.cuCtxGetFlags(ctypes.byref(flags)) != 0:
        return False
    return flags.value & SCHED_MASK in SPINNING_MODES


def busy(wait: DeviceWait, spinning: bool) -> bool:
    """Whether a synchronize at a call's start found work pending: CPU spun beyond
    BUSY_WAIT_MS, or (not spinning, not preempted) the wall time."""
    if spinning:
        return wait.cpu_ms > BUSY_WAIT_MS
    return not wait.preempted and wait.wall_ms > BUSY_WAIT_MS


def _tids() -> set[int]:
    try:
        return {int(t) for t in os.listdir(TASKS)}
    except OSError:
        return set()


def thread_cpu_ns(tid: int) -> int:
    """CPU time of one thread (0 when gone); Linux's thread CPU clock id is (~tid << 3) | 6."""
    try:
        return clocks.clock_gettime_ns((~tid << 3) | 6)
    except OSError:
        return 0


def warm_pool() -> None:
    """Start PyTorch's and BLAS's threads now, so they count as ours."""
    torch.zeros(1 << 20).add_(1.0)
    a = torch.ones(256, 256)
    torch.mm(a, a)


class Ledger:
    def __init__(self, device: torch.device):
        self.device = device
        self.ours = _tids()  # before candidate code: the evaluator's and PyTorch's threads
        self.outside_ns = 0
        self.timed_ns = 0
        self.busy_calls = 0
        self.host_waits = 0  # long synchronizes the thread did not spend spinning (`busy`)
        self.drain_ns = 0  # time timed calls spent waiting for the candidate's threads
        self.active = False  # the candidate had threads at the last call's end
        self._mark: tuple[int, int, int] | None = None
        self._t0 = 0

    def _others(self) -> int:
        return sum(thread_cpu_ns(t) for t in self.ours if t != _main_tid())

    def _reading(self) -> tuple[int, int, int]:
        return (clocks.clock_gettime_ns(clocks.CLOCK_PROCESS_CPUTIME_ID),
                clocks.thread_time_ns(), self._others())

    def device_idle(self) -> None:
        """Before a timed call's inputs are drawn: nothing the candidate launched still runs."""
        if self.device.type == "cuda":
            wait = device_wait(self.device)
            if busy(wait, waits_spinning()):
                self.busy_calls += 1
            elif wait.wall_ms > BUSY_WAIT_MS:
                self.host_waits += 1  # long, but not the device's: counted, not charged

    def call_starts(self) -> None:
        """Right before a timed call: charge CPU since the last call's end to its threads."""
        now = self._reading()
        if self._mark is not None:
            proc, main, ours = (a - b for a, b in zip(now, self._mark))
            self.outside_ns += max(0, proc - main - ours)
        self._t0 = clocks.perf_counter_ns()

    def call_ended(self) -> None:
        self.timed_ns += clocks.perf_counter_ns() - self._t0
        self._mark = self._reading()
        self.active = bool(_tids() - self.ours)

    def drain(self) -> None:
        """Inside the timed region: wait while the candidate's threads still use CPU."""
        if not self.active:
            return
        t0 = clocks.perf_counter()
        try:
            while clocks.perf_counter() < t0 + DRAIN_MAX_S:
                theirs = _tids() - self.ours
                before = sum(map(thread_cpu_ns, theirs))
                clocks.sleep(POLL_S)
                # quiet: little CPU and none waiting for a core
                if (sum(map(thread_cpu_ns, theirs)) - before < QUIET_NS
                        and not any(map(_runnable, theirs))):
                    return
        finally:
            self.drain_ns += int((clocks.perf_counter() - t0) * 1e9)

    def report(self) -> dict:
        clocks.sleep(0.02)  # a thread that waits before working after the last call
        self.device_idle()  # what ran after the last call
        self.call_starts()
        return {"outside_ms": self.outside_ns / 1e6, "timed_ms": self.timed_ns / 1e6,
                "busy_calls": self.busy_calls, "host_waits": self.host_waits,
                "threads": self.newcomers()}

    def newcomers(self, most: int = 5) -> list[str]:
        """The candidate's live threads as "name: CPU ms", the busiest first."""
        seen = sorted(((thread_cpu_ns(t), _comm(t)) for t in _tids() - self.ours),
                      reverse=True)
        return [f"{name}: {ns / 1e6:.1f} ms" for ns, name in seen[:most]]


def _runnable(tid: int) -> bool:
    """The thread is running or waiting for a core (state R), not asleep or gone."""
    try:
        with open(f"{TASKS}/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "R"
    except (OSError, IndexError):
        return False


def _comm(tid: int) -> str:
    try:
        with open(f"{TASKS}/{tid}/comm") as f:
            return f.read().strip()[:32]
    except OSError:
        return f"tid {tid} (gone)"


def _main_tid() -> int:
    return _MAIN


_MAIN = os.getpid()  # the child's main thread (its tid is the process id)
