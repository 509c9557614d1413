"""Work a candidate's own threads do outside its timed calls (runs in the candidate's child).

A candidate can return from forward early and let a thread it started finish the work
between calls, where the timer does not count it. Two answers, by per-thread CPU clocks
(native threads included):

- `drain`, inside the timed region: while the candidate's threads keep using CPU, the
  call is not over (only when such threads existed at the previous call's end).
- `Ledger`, between calls: the process's CPU time outside the timed calls, less the main
  thread's and the threads that existed before candidate code loaded, was spent by the
  candidate's threads; the parent flags `work_outside_call` above a tenth of the timed
  calls' total plus 1 ms.

On a GPU the device must also be idle when the next call begins: work still running was
launched outside the calls. It is judged by the CPU this thread spends spinning in a
device-wide synchronize (`busy`), not its wall time, which a loaded host inflates; a
context that does not spin is judged by the wall time.
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
# The driver, bound before candidate code loads (None without one: a CPU machine).
try:
    _CUDA: ctypes.CDLL | None = ctypes.CDLL("libcuda.so.1")
except OSError:
    _CUDA = None
SCHED_MASK, SPINNING_MODES = 0x07, (0x00, 0x01)  # CU_CTX_SCHED_AUTO, CU_CTX_SCHED_SPIN


def waits_spinning() -> bool:
    """Whether this thread's CUDA context waits for the device by spinning on the CPU
    (its scheduling flags: CUDA's default, AUTO, spins with fewer contexts than cores)."""
    flags = ctypes.c_uint()
    if _CUDA is None or _CUDA.cuCtxGetFlags(ctypes.byref(flags)) != 0:
        return False
    return flags.value & SCHED_MASK in SPINNING_MODES


def busy(wait: DeviceWait, spinning: bool) -> bool:
    """Whether a device-wide synchronize at a call's start found work pending. A spinning
    context: the thread spun longer than BUSY_WAIT_MS (time it spent off the CPU, asleep
    or preempted, is the host's, not the device's). Otherwise the wall time, unless the
    thread was preempted (then no evidence either way)."""
    if spinning:
        return wait.cpu_ms > BUSY_WAIT_MS
    return not wait.preempted and wait.wall_ms > BUSY_WAIT_MS


def _tids() -> set[int]:
    try:
        return {int(t) for t in os.listdir(TASKS)}
    except OSError:
        return set()


def thread_cpu_ns(tid: int) -> int:
    """CPU time of one thread of this process (0 when it is gone or the clock is
    unavailable). Linux encodes a thread's CPU clock id as (~tid << 3) | 6."""
    try:
        return clocks.clock_gettime_ns((~tid << 3) | 6)
    except OSError:
        return 0


def warm_pool() -> None:
    """Start PyTorch's intra-op threads and the BLAS library's now, so that they count as
    ours, not as the candidate's."""
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
        """Before a timed call's inputs are drawn (nothing of ours is queued then): see that
        nothing the candidate launched is still running on the device."""
        if self.device.type == "cuda":
            wait = device_wait(self.device)
            if busy(wait, waits_spinning()):
                self.busy_calls += 1
            elif wait.wall_ms > BUSY_WAIT_MS:
                self.host_waits += 1  # long, but not the device's: counted, not charged

    def call_starts(self) -> None:
        """Right before a timed call (its inputs drawn): charge what happened since the
        last call's end to the candidate's threads."""
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
                # Quiet: little CPU over the poll and none waiting for a core (on a loaded
                # host a busy thread may get no CPU in one poll)
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
        """The candidate's threads still alive, as "name: CPU ms" (their whole lives), the
        busiest first: which of them a `work_outside_call` flag is about."""
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
