"""A candidate's own compiles in its run child, kept off the device's turn: cpp_extension
builds, dynamo/inductor compiles (torch.compile), `torch.jit.script` and Triton's JIT each
run inside `CompileTurn`, which lets go of the child's share of the device lock, so no
timing step waits on a compiler. A compile's own device work (autotuning benchmarks) takes
the device back for its length.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kb_eval import clocks
from kb_eval.devlock import DeviceLock
from kb_eval.eval.child.steps import COMPILE, WAIT, last_step, mark
from kb_eval.faults import stall_if_armed

_REAL = "kb_real"  # a wrapper's attribute naming the function it wraps
STALL_S = 60.0  # the `compile_stall` fault point's delay (kb_eval/faults.py)


def around_compiles(around: Callable[[], AbstractContextManager]) -> None:
    """Run every cpp_extension build of this process inside `around()` (replacing any
    earlier wrapper)."""
    import torch.utils.cpp_extension as cpp

    _wrap(cpp, "_jit_compile", around)


# A candidate's JIT compilers (module, attribute path, role): a "compile" runs with the
# device let go; "device" is a compile's own device work, run with the device held.
# Paths a torch or Triton version lacks are skipped.
JIT_HOOKS = (
    ("torch._dynamo.convert_frame", "_compile", "compile"),
    ("torch.jit", "script", "compile"),
    ("triton.compiler", "compile", "compile"),
    ("triton.compiler.compiler", "compile", "compile"),
    ("triton.testing", "do_bench", "device"),
    *(("torch._inductor.runtime.benchmarking", f"{cls}.benchmark_gpu", "device")
      for cls in ("Benchmarker", "TritonBenchmarker", "InductorBenchmarker")),
)


def around_jit_compiles(turn: "CompileTurn") -> None:
    """Wrap every JIT_HOOKS entry: now for modules already imported, else as they are."""
    for module, path, role in JIT_HOOKS:
        around = turn if role == "compile" else turn.device_turn
        _after_import(module, functools.partial(_wrap_path, path=path, around=around))


def _wrap_path(module, path: str, around: Callable[[], AbstractContextManager]) -> None:
    *owners, name = path.split(".")
    owner = module
    for part in owners:
        owner = getattr(owner, part, None)
    if owner is not None and callable(getattr(owner, name, None)):
        _wrap(owner, name, around)


def _wrap(owner, name: str, around: Callable[[], AbstractContextManager]) -> None:
    """`owner.name` replaced by a wrapper running it inside `around()` (replacing any
    earlier wrapper of ours)."""
    found = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else None
    if isinstance(found, (staticmethod, classmethod)):
        return  # not a plain function: left alone
    real = getattr(owner, name)
    real = getattr(real, _REAL, real)

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        with around():
            return real(*args, **kwargs)

    setattr(wrapper, _REAL, real)
    setattr(owner, name, wrapper)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks on modules as they finish importing (one finder per process)."""

    def __init__(self):
        self.waiting: dict[str, list[Callable]] = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            if (spec := finder.find_spec(fullname, path, target)) is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, callbacks = spec.loader.exec_module, self.waiting.pop(fullname)

        def exec_module(module):
            run(module)
            for callback in callbacks:
                callback(module)

        spec.loader.exec_module = exec_module
        return spec


def _after_import(module: str, callback: Callable) -> None:
    if module in sys.modules:
        callback(sys.modules[module])
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None)
    if finder is None:
        finder = _AfterImport()
        sys.meta_path.insert(0, finder)
    finder.waiting.setdefault(module, []).append(callback)


class CompileTurn:
    """The run child's `around` for its compiles: only a shared hold is let go, once for
    compiles on several threads at once; `device_turn` takes it back meanwhile."""

    def __init__(self, lock: DeviceLock, workdir: Path):
        self.lock, self.workdir = lock, Path(workdir)
        self._guard = threading.Lock()
        self._open = 0  # compiles running
        self._turns = 0  # device turns running
        self._resume: str | None = None  # the step the compiles interrupted, while they run
        self._since = 0.0
        self.seconds = 0.0  # spent compiling with the lock let go (the child's account)

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._counted("_open"):
            stall_if_armed("compile_stall", STALL_S)
            yield

    @contextmanager
    def device_turn(self) -> Iterator[None]:
        """Device work inside a compile (an autotuner's benchmark): the device held shared."""
        with self._counted("_turns"):
            yield

    @contextmanager
    def _counted(self, counter: str) -> Iterator[None]:
        with self._guard:
            setattr(self, counter, getattr(self, counter) + 1)
            self._settle()
        try:
            yield
        finally:
            with self._guard:
                setattr(self, counter, getattr(self, counter) - 1)
                self._settle()

    def _settle(self) -> None:
        """Under the guard: while compiles run and no device turn does, the shared hold is
        let go; when the last compile ends, it is taken back behind any timing step."""
        if self._open and self._resume is None and self.lock.mode == "shared":
            self._resume, self._since = last_step(), clocks.monotonic()
            mark(self.workdir, COMPILE)
        if self._resume is None:
            return
        if not self._open:
            step, self._resume = self._resume, None
            self.seconds += clocks.monotonic() - self._since
            mark(self.workdir, WAIT)  # a timing step that queued meanwhile goes first
            self.lock.acquire("shared")
            mark(self.workdir, step)
        elif self._turns:
            self.lock.acquire("shared")
        else:
            self.lock.release()


def yield_turn(lock: DeviceLock, workdir: Path) -> None:
    """Between two untimed steps: a timing step waiting for the device goes first."""
    if lock.mode != "shared":
        return
    step = last_step()
    mark(workdir, WAIT)
    lock.yield_turn()
    mark(workdir, step)
