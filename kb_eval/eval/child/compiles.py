"""A candidate's own compiles (`load_inline` in its run child), kept off the device's turn:
every cpp_extension build runs inside `CompileTurn`, which lets go of the child's share of
the device lock, so no timing step waits on a compiler.
"""

from __future__ import annotations

import functools
import threading
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kb_eval import clocks
from kb_eval.devlock import DeviceLock
from kb_eval.eval.child.steps import COMPILE, WAIT, last_step, mark
from kb_eval.faults import stall_if_armed

_REAL = "kb_real"  # the wrapper's attribute naming torch's own _jit_compile
STALL_S = 60.0  # the `compile_stall` fault point's delay (kb_eval/faults.py)


def around_compiles(around: Callable[[], AbstractContextManager]) -> None:
    """Run every cpp_extension build of this process inside `around()` (replacing any
    earlier wrapper)."""
    import torch.utils.cpp_extension as cpp

    real = getattr(cpp._jit_compile, _REAL, cpp._jit_compile)

    @functools.wraps(real)
    def _jit_compile(*args, **kwargs):
        with around():
            return real(*args, **kwargs)

    setattr(_jit_compile, _REAL, real)
    cpp._jit_compile = _jit_compile


class CompileTurn:
    """The run child's `around` for its compiles: only a shared lock is let go, once for
    compiles on several threads at once."""

    def __init__(self, lock: DeviceLock, workdir: Path):
        self.lock, self.workdir = lock, Path(workdir)
        self._guard = threading.Lock()
        self._open = 0  # compiles running
        self._resume: str | None = None  # the step the first of them interrupted
        self._since = 0.0
        self.seconds = 0.0  # spent compiling with the lock let go (the child's account)

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self._enter()
        try:
            stall_if_armed("compile_stall", STALL_S)
            yield
        finally:
            self._leave()

    def _enter(self) -> None:
        with self._guard:
            self._open += 1
            if self._open > 1 or self.lock.mode != "shared":
                return
            self._resume, self._since = last_step(), clocks.monotonic()
            mark(self.workdir, COMPILE)
            self.lock.release()

    def _leave(self) -> None:
        with self._guard:
            self._open -= 1
            if self._open or self._resume is None:
                return
            step, self._resume = self._resume, None
            self.seconds += clocks.monotonic() - self._since
            mark(self.workdir, WAIT)  # a timing step that queued meanwhile goes first
            self.lock.acquire("shared")
            mark(self.workdir, step)


def yield_turn(lock: DeviceLock, workdir: Path) -> None:
    """Between two untimed steps: a timing step waiting for the device goes first."""
    if lock.mode != "shared":
        return
    step = last_step()
    mark(workdir, WAIT)
    lock.yield_turn()
    mark(workdir, step)
