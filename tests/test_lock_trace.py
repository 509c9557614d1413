"""The device lock's trace (kb_eval/devlock.py, KB_EVAL_LOCK_TRACE): every hold's start
and end, by process, device and mode, and how long a device was held alone, only shared,
or by no one (what benchmarks/eval_throughput.py prints)."""

from __future__ import annotations

import os

import pytest

from kb_eval.devlock import TRACE_VAR, DeviceLock, hold_shares, timing_gaps


def test_hold_shares_of_a_written_trace(tmp_path):
    trace = tmp_path / "t"
    trace.write_text("\n".join([
        "10.0 1 gpu0 shared +", "10.5 2 gpu0 shared +",  # two share the device
        "11.0 1 gpu0 shared -", "12.0 2 gpu0 shared -",
        "13.0 3 gpu0 exclusive +", "14.5 3 gpu0 exclusive -",  # 1 s idle, then alone
        "10.0 4 gpu1 exclusive +", "10.5 4 gpu1 exclusive -",  # another device
        "11.0 5 gpu1 shared +",  # killed while holding: ends with the trace
    ]) + "\n")
    held = hold_shares(trace)
    assert held == pytest.approx({"exclusive": 1.5 + 0.5, "shared": 2.0, "none": 1.0 + 0.5})


def test_gaps_between_timing_steps_per_device(tmp_path):
    """The time from one exclusive hold's end to the next one's start, device by device;
    shared holds and an exclusive hold the trace never saw end (killed) make no gap."""
    trace = tmp_path / "t"
    trace.write_text("\n".join([
        "10.0 1 gpu0 exclusive +", "10.4 1 gpu0 exclusive -",
        "10.4 2 gpu0 exclusive +", "10.7 2 gpu0 exclusive -",  # back to back: 0
        "10.7 3 gpu0 shared +", "11.2 3 gpu0 shared -",
        "11.2 4 gpu0 exclusive +", "11.5 4 gpu0 exclusive -",  # after a shared turn: 0.5
        "10.0 5 gpu1 exclusive +", "10.1 5 gpu1 exclusive -",
        "12.1 6 gpu1 exclusive +",  # killed while timing: its start still ends a gap
    ]) + "\n")
    assert sorted(timing_gaps(trace)) == pytest.approx([0.0, 0.5, 2.0])


def test_the_lock_logs_its_holds_only_when_asked(tmp_path, monkeypatch):
    path, trace = tmp_path / "d.lock", tmp_path / "holds"
    lock = DeviceLock(path)
    lock.acquire("shared")
    lock.release()
    assert not trace.exists()
    monkeypatch.setenv(TRACE_VAR, str(trace))
    with lock.held("shared"):
        with lock.held("exclusive"):  # from shared to exclusive and back
            pass
    lines = [line.split() for line in trace.read_text().splitlines()]
    pid = str(os.getpid())
    assert [(p, d, m, e) for _, p, d, m, e in lines] == [
        (pid, "d", "shared", "+"), (pid, "d", "shared", "-"),
        (pid, "d", "exclusive", "+"), (pid, "d", "exclusive", "-"),
        (pid, "d", "shared", "+"), (pid, "d", "shared", "-")]
    times = [float(t) for t, *_ in lines]
    assert times == sorted(times)
    assert set(hold_shares(trace)) == {"exclusive", "shared", "none"}


def test_a_trace_that_cannot_be_written_never_keeps_the_device(tmp_path, monkeypatch):
    """The trace is a diagnostic: where it cannot be written (here a folder stands at its
    path), holds are taken and given back as without it."""
    path, trace = tmp_path / "d.lock", tmp_path / "holds"
    trace.mkdir()
    monkeypatch.setenv(TRACE_VAR, str(trace))
    lock, other = DeviceLock(path), DeviceLock(path)
    lock.acquire("exclusive")
    lock.release()
    assert lock.mode is None
    other.acquire("exclusive")  # free again: it would block for ever if still held
    other.release()


def test_every_hold_of_a_run_is_released_in_the_trace(tmp_path, monkeypatch, build_cache_dir):
    """A child lets go of its last shared hold (traced) before it ends: a hold left open
    would count as held until the trace's end and be named as holding up later waits."""
    from pathlib import Path

    from kb_eval.eval import EvalConfig, evaluate
    from kb_eval.problems import load_problems
    from kb_eval.timing import TimingSettings

    problems = Path(__file__).parent / "adversarial" / "problems"
    problem = next(p for p in load_problems(str(problems)) if p.problem_id == 1)  # 2x + y
    honest = ("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x, y):\n        return x * 2.0 + y\n")
    trace = tmp_path / "holds"
    monkeypatch.setenv(TRACE_VAR, str(trace))
    cfg = EvalConfig(backend="cpp", live_baseline=True, correct_trials=2, jobs=1,
                     timing=TimingSettings(warmup=1, trials=3), cache_dir=build_cache_dir,
                     results_dir=tmp_path / "r")
    (record,) = list(evaluate([(problem, 0, honest)], cfg))
    assert record.status == "correct", record.error
    balance: dict[tuple[str, str], int] = {}
    for _, pid, _, mode, event in (line.split() for line in trace.read_text().splitlines()):
        balance[(pid, mode)] = balance.get((pid, mode), 0) + (1 if event == "+" else -1)
    assert balance and all(v == 0 for v in balance.values()), balance
