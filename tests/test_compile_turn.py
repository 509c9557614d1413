"""A candidate's own compiles and its untimed steps never keep a timing step waiting
(kb_eval/eval/child/compiles.py, DeviceLock.yield_turn), nor hold a place on the device
(overlap.py: Slot.compiling, Budgets). The end-to-end run: tests/test_overlap.py."""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time

import pytest

from kb_eval.devlock import DeviceLock
from kb_eval.eval.child import compiles
from kb_eval.eval.child.steps import last_step, mark
from kb_eval.eval.config import EvalConfig
from kb_eval.eval.schedule.overlap import PROGRESS, Budgets, DeviceSlots
from test_device_slots import Sample, _until


def _writer_waits(path) -> bool:
    """Someone holds the lock's gate: a writer queued for the lock (devlock.py)."""
    fd = os.open(f"{path}.gate", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _timing_step(path, events: list) -> threading.Thread:
    """A neighbour's timing step, queued for the lock alone."""
    def run():
        with DeviceLock(path).held("exclusive"):
            events.append("timed")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _until(lambda: _writer_waits(path))
    return thread


def test_a_waiting_timing_step_goes_between_two_untimed_steps(tmp_path):
    path, events = tmp_path / "dev.lock", []
    lock = DeviceLock(path)
    lock.acquire("shared")
    mark(tmp_path, "call 1")
    thread = _timing_step(path, events)
    assert events == []  # it waits for our share
    compiles.yield_turn(lock, tmp_path)
    assert events == ["timed"]  # in before our next call
    assert lock.mode == "shared" and (tmp_path / PROGRESS).read_text() == "call 1"
    thread.join(5)


def test_a_compile_lets_go_of_the_lock_and_marks_it(tmp_path):
    path, events = tmp_path / "dev.lock", []
    lock = DeviceLock(path)
    lock.acquire("shared")
    mark(tmp_path, "load")
    turn = compiles.CompileTurn(lock, tmp_path)
    thread = _timing_step(path, events)
    with turn():
        thread.join(5)  # the timing step runs while the compile does
        assert events == ["timed"]
        assert lock.mode is None and (tmp_path / PROGRESS).read_text() == "compile"
        with turn():  # a second compile at once (another thread of the candidate's)
            pass
        assert lock.mode is None
    assert lock.mode == "shared" and last_step() == "load" and turn.seconds > 0
    assert (tmp_path / PROGRESS).read_text() == "load"


def test_a_compile_in_the_timing_step_keeps_the_lock(tmp_path):
    lock = DeviceLock(tmp_path / "dev.lock")
    lock.acquire("exclusive")
    mark(tmp_path, "timing")
    with compiles.CompileTurn(lock, tmp_path)():
        assert lock.mode == "exclusive" and (tmp_path / PROGRESS).read_text() == "timing"
    assert lock.mode == "exclusive"


class _Refused(Exception):
    pass


def test_load_inline_imported_by_name_goes_through_the_wrapper(tmp_path, monkeypatch):
    """A candidate's own `from torch.utils.cpp_extension import load_inline` is covered:
    the wrapper sits on the module attribute both load and load_inline call through."""
    import torch.utils.cpp_extension as cpp
    from torch.utils.cpp_extension import load, load_inline

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # load_inline writes there
    real = getattr(cpp._jit_compile, compiles._REAL, cpp._jit_compile)
    entered = []

    def refuse():
        entered.append(1)
        raise _Refused  # before any compiler runs

    try:
        compiles.around_compiles(refuse)
        compiles.around_compiles(refuse)  # installed again: wraps torch's, not itself
        with pytest.raises(_Refused):
            load_inline("kb_never_built", cpp_sources="int f() { return 1; }")
        with pytest.raises(_Refused):
            load("kb_never_built_either", sources=["nowhere.cpp"])
        assert entered == [1, 1]
    finally:
        cpp._jit_compile = real


def test_a_compiling_child_holds_no_place_but_its_charge():
    slots = DeviceSlots(2)
    a, b = Sample(slots, 4, 12), Sample(slots, 4, 12)
    c = Sample(slots, 3, 12)
    assert a.running and b.running and c.waiting
    a.slot.compiling(True)
    assert c.running  # three alive on a depth of two, while a compiles
    a.slot.compiling(False)  # a goes on without waiting for a place
    d = Sample(slots, 6, 12)
    b.end()
    assert d.waiting  # a and c hold both places
    a.slot.compiling(True)
    assert d.waiting  # a place, but not the memory: a's 4 + c's 3 + 6 > 12
    a.end()
    assert d.running
    c.end()
    d.end()


def test_a_compiling_child_of_unknown_size_holds_no_place():
    slots = DeviceSlots(1)
    a, b = Sample(slots, 0, 0), Sample(slots, 0, 0)
    assert a.running and b.waiting
    a.slot.compiling(True)
    assert b.running
    retook = threading.Event()
    # a's child was killed in its compile: the retry's child waits for the place
    threading.Thread(target=lambda: (a.slot.retake(), retook.set()), daemon=True).start()
    assert not retook.wait(0.2)
    b.end()
    assert retook.wait(5)
    a.end()


def _step(budgets: Budgets, tmp_path, step: str, seconds: float = 0.0) -> str | None:
    (tmp_path / PROGRESS).write_text(step)
    verdict = budgets()
    if seconds:
        time.sleep(seconds)
        verdict = budgets()
    return verdict


def test_budgets_charge_a_compile_to_the_step_it_interrupts(tmp_path):
    """A compile and the wait after it leave the step's budget running on: the load
    budget covers the candidate's import, init and first call, its compiles too. The
    parent hears when a compile starts and ends."""
    told: list[bool] = []
    cfg = EvalConfig(load_budget_s=3.0, call_budget_s=3.0)
    budgets = Budgets(tmp_path, cfg, compiling=told.append)
    assert _step(budgets, tmp_path, "load", 2.0) is None
    assert _step(budgets, tmp_path, "compile") is None
    assert told == [True]
    assert _step(budgets, tmp_path, "wait", 1.5) is None  # waits are charged to nothing
    assert told == [True, False]
    over = _step(budgets, tmp_path, "load", 2.0)  # 4 s of load in all
    assert over and "load budget" in over and "'load'" in over, over
    budgets = Budgets(tmp_path, cfg, compiling=told.append)
    assert _step(budgets, tmp_path, "load", 2.0) is None
    over = _step(budgets, tmp_path, "compile", 2.0)
    assert over and "compiling" in over, over
    assert _step(budgets, tmp_path, "call 1") is None  # a new step, a new budget


def test_torch_compile_and_its_benchmarks_take_their_own_turns(tmp_path):
    """torch.compile's compile (dynamo's `_compile`, the backend inside it) runs with the
    shared hold let go; an autotuner's benchmark inside it takes the device back; the
    step it interrupted resumes holding the device."""
    import torch

    lock = DeviceLock(tmp_path / "dev.lock")
    lock.acquire("shared")
    mark(tmp_path, "call 1")
    turn = compiles.CompileTurn(lock, tmp_path)
    compiles.around_jit_compiles(turn)
    seen = []

    def backend(gm, example_inputs):
        seen.append(("compiling", lock.mode, (tmp_path / PROGRESS).read_text()))
        with turn.device_turn():  # as Benchmarker.benchmark_gpu runs, wrapped
            seen.append(("benchmark", lock.mode))
        seen.append(("compiling", lock.mode))
        return gm.forward

    compiled = torch.compile(lambda x: x * 2 + 1, backend=backend, dynamic=False)
    assert compiled(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert seen == [("compiling", None, "compile"), ("benchmark", "shared"),
                    ("compiling", None)]
    assert lock.mode == "shared" and turn.seconds > 0
    assert (tmp_path / PROGRESS).read_text() == "call 1"
    script_before = turn.seconds
    assert torch.jit.script(_plus_one)(torch.ones(1)).item() == 2.0
    assert turn.seconds > script_before and lock.mode == "shared"


def _plus_one(x):
    return x + 1


def test_a_compiler_imported_later_is_wrapped_as_it_loads(tmp_path, monkeypatch):
    """Triton and inductor's benchmarker load only when a candidate uses them: their
    entry points are wrapped as the import finishes, an import from its own name too."""
    (tmp_path / "kb_late_compiler.py").write_text("def compile(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entered = []
    compiles._after_import("kb_late_compiler", lambda m: compiles._wrap_path(
        m, "compile", lambda: _Counting(entered)))
    import kb_late_compiler
    from kb_late_compiler import compile as by_name

    assert kb_late_compiler.compile(2) == 4 and by_name(3) == 6 and entered == [1, 1]
    compiles._after_import("kb_late_compiler", lambda m: compiles._wrap_path(
        m, "compile", lambda: _Counting(entered)))  # already loaded: wrapped at once,
    assert kb_late_compiler.compile(1) == 2 and entered == [1, 1, 1]  # not twice
    sys.modules.pop("kb_late_compiler")


class _Counting:
    def __init__(self, entered: list):
        self.entered = entered

    def __enter__(self):
        self.entered.append(1)

    def __exit__(self, *exc):
        return False
