"""The per-device timing lock: several candidate children may work on one device at once,
but a timed region runs alone.

A reader/writer lock across processes from two `flock` files: untimed work holds `<path>`
shared, a timed region holds it exclusive, and `<path>.gate` lets waiting writers win.
Locks die with their process; threads open their own files. The child's holds are
cooperative: dropping them only slows its neighbours, holding too long meets the lane's
budgets. KB_EVAL_LOCK_TRACE logs every hold (`hold_shares`, `timing_gaps` read it).
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kb_eval.isolation.sandbox import leader_pid


TRACE_VAR = "KB_EVAL_LOCK_TRACE"


class DeviceLock:
    """The lock of one device, named by its file (each process opens its own)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self._fd: int | None = None
        self._mode: str | None = None

    def _open(self, suffix: str = "") -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(f"{self.path}{suffix}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self, mode: str) -> None:
        """Take the lock `shared` or `exclusive`, dropping any other hold first (upgrading
        while holding would deadlock two such)."""
        if self.path is None or self._mode == mode:
            return
        self.release()
        gate, fd = self._open(".gate"), self._open()
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.close(gate)  # closing lets go of the gate
        self._fd, self._mode = fd, mode
        self._trace("+")

    def yield_turn(self) -> None:
        """Let a waiting timed region go first: the shared hold is let go and taken again
        through the gate, behind any waiting writer."""
        if self._mode == "shared":
            self.release()
            self.acquire("shared")

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # first: a trace that fails must not keep the device held
            self._trace("-")
        self._fd = self._mode = None

    def _trace(self, event: str) -> None:
        """One line per hold's start (+) or end (-) when tracing: one short O_APPEND write,
        so the lines of several processes never interleave."""
        if trace := os.environ.get(TRACE_VAR):
            line = f"{time.monotonic():.6f} {leader_pid()} {self.path.stem} {self._mode} {event}\n"
            try:  # a diagnostic: a trace that cannot be written never fails a hold
                fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            except OSError:
                pass

    @property
    def mode(self) -> str | None:
        return self._mode

    @contextmanager
    def held(self, mode: str) -> Iterator[None]:
        """Hold the lock `mode` for the block, then go back to what was held before."""
        before = self._mode
        self.acquire(mode)
        try:
            yield
        finally:
            if before is None:
                self.release()
            else:
                self.acquire(before)


@contextmanager
def device_lock(path: str | os.PathLike | None, mode: str) -> Iterator[None]:
    """One hold of the device's lock for a block (a fresh open: safe from any thread)."""
    lock = DeviceLock(path)
    with lock.held(mode):
        yield


def hold_shares(trace: str | os.PathLike) -> dict[str, float]:
    """Seconds of a traced run (per device from first hold to last release, summed) in
    which a device was held exclusive, only shared, or by no one."""
    held = {"exclusive": 0.0, "shared": 0.0, "none": 0.0}
    for events in _events(trace).values():
        holders = {"exclusive": 0, "shared": 0}
        last = events[0][0]
        for t, start, mode, _pid in events:
            state = ("exclusive" if holders["exclusive"] else
                     "shared" if holders["shared"] else "none")
            held[state] += t - last
            holders[mode] = max(0, holders[mode] + (1 if start else -1))
            last = t
    return held


def timing_gaps(trace: str | os.PathLike) -> list[float]:
    """Seconds between one exclusive hold's end and the next one's start on the same
    device: where the device waited for the next timing step."""
    gaps = []
    for events in _events(trace).values():
        began: dict[str, float] = {}
        ended = None
        for t, start, mode, pid in events:
            if mode != "exclusive":
                continue
            if start:
                if ended is not None:
                    gaps.append(max(0.0, t - ended))
                began[pid] = t
            elif began.pop(pid, None) is not None:
                ended = t
    return gaps


def _events(trace: str | os.PathLike) -> dict[str, list[tuple[float, bool, str, str]]]:
    """A trace's lines by device: (time, start?, mode, pid), in time order (at one
    instant, ends before starts)."""
    by_device: dict[str, list] = {}
    for line in Path(trace).read_text().splitlines():
        t, pid, device, mode, event = line.split()
        by_device.setdefault(device, []).append((float(t), event == "+", mode, pid))
    for events in by_device.values():
        events.sort(key=lambda e: (e[0], e[1]))
    return by_device
