"""Both sides of a paired timing launch from one CPU core (kb_eval/eval/schedule/pinning.py):
the pairing thread pins a real child and a real stand-in server before each reference round,
re-pins a child that moved itself, and gives the server its mask back."""

import os
import subprocess
import sys
import textwrap

import pytest

from kb_eval.eval.schedule import pinning
from kb_eval.eval.schedule.pairing import Pairing
from kb_eval.timing import TimingSettings

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two CPU cores")

# The candidate's side of the handshake (as child/worker.py does it): its pid, then
# ready_r / go_r for each round; after round 0 it moves itself back to every core.
CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    folder, rounds, cores = Path(sys.argv[1]), int(sys.argv[2]), set(map(int, sys.argv[3].split(",")))
    (folder / "pid").write_text(str(os.getpid()))
    for r in range(rounds + 1):
        (folder / f"ready_{r}").write_text("")
        while not (folder / f"go_{r}").exists():
            time.sleep(0.002)
        (folder / f"mask_{r}").write_text(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        os.sched_setaffinity(0, cores)
""")


def test_timing_cores_are_one_per_gpu_and_never_all_of_them():
    cores = {pinning.timing_core(str(i)) for i in range(len(CORES) - 1)}
    assert len(cores) == len(CORES) - 1 and cores <= set(CORES)


def rounds_of(n: int) -> TimingSettings:
    """Settings of `n` paired rounds of one timed call each."""
    return TimingSettings(trials=n, paired_rounds=n)


def test_both_sides_are_pinned_at_every_round_and_the_server_is_restored(tmp_path):
    core, rounds = CORES[-1], 4
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(rounds),
                              ",".join(map(str, CORES))], start_new_session=True)
    seen = []

    def time_rounds(due, settings):
        seen.extend((r, os.sched_getaffinity(child.pid), os.sched_getaffinity(server.pid))
                    for r in due)
        return [{"ms": [1.0], "busy_ms": 0.0} for _ in due]

    try:
        pairing = Pairing(time_rounds, tmp_path, rounds_of(rounds), set(), core,
                          lambda: server.pid)
        pairing.start()
        assert child.wait(timeout=60) == 0
        assert pairing.finish() is not None, pairing.error
        assert sorted(r for r, _, _ in seen) == list(range(rounds))
        # The child moved itself back to every core after each go; every round, its own
        # and the reference's, found it (and the server) on the one core again.
        assert all(c == {core} and s == {core} for _, c, s in seen), seen
        masks = [(tmp_path / f"mask_{r}").read_text() for r in range(rounds)]
        assert masks == [str(core)] * rounds
        assert os.sched_getaffinity(server.pid) == set(CORES)
    finally:
        server.kill()
        child.kill()


def test_without_a_core_nothing_is_pinned(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), "2",
                              ",".join(map(str, CORES))], start_new_session=True)
    seen = []
    try:
        pairing = Pairing(lambda due, s: seen.append(os.sched_getaffinity(server.pid))
                          or [{"ms": [1.0], "busy_ms": 0.0}] * len(due), tmp_path, rounds_of(2), set(),
                          None, lambda: server.pid)
        pairing.start()
        assert child.wait(timeout=60) == 0
        assert pairing.finish() is not None
        assert seen == [set(CORES)] * 2
    finally:
        server.kill()
        child.kill()


def test_only_gpu_timings_get_a_core_and_the_switch_turns_it_off(monkeypatch):
    assert pinning.core_for("cpu") is None and pinning.core_for("cpu:1") is None
    assert pinning.core_for("0") == pinning.timing_core("0") == CORES[-1]
    monkeypatch.setenv(pinning.SWITCH_VAR, "0")
    assert pinning.core_for("0") is None


def test_builds_and_device_children_keep_off_the_timing_cores(monkeypatch):
    """Builds and device children never share a core with a timing thread (a preempted
    device-wide wait proves nothing, timing.py), and a child takes the mask it is given
    (isolation/child.py)."""
    devices = ["0", "1"] if len(CORES) > 2 else ["0"]
    cores = pinning.untimed_cores(devices)
    timing = {pinning.timing_core(d) for d in devices}
    assert cores == set(CORES) - timing and cores
    assert pinning.untimed_cores(["cpu"]) is None  # a CPU run times on every core
    monkeypatch.setenv(pinning.SWITCH_VAR, "0")
    assert pinning.untimed_cores(devices) is None
    monkeypatch.delenv(pinning.SWITCH_VAR)
    env = {**os.environ, "KB_EVAL_CORES": str(CORES[0])}
    # child_main applies the mask first: its start-up (replaced here) sees only that core
    task = ("import os, sys; from kb_eval.isolation import child; "
            "child._preload = lambda *a: print(sorted(os.sched_getaffinity(0)), flush=True); "
            "sys.argv = ['x', '']; sys.stdin = open(os.devnull); child.child_main()")
    out = subprocess.run([sys.executable, "-c", task], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == f"[{CORES[0]}]", out.stderr[-2000:]


def test_device_children_start_off_the_timing_cores(tmp_path):
    """With a GPU lane, every device child's environment names the untimed cores (the
    pairing alone moves a timed main thread onto the timing core); a CPU run times on
    every core and restricts none."""
    from kb_eval.eval.config import EvalConfig
    from kb_eval.eval.schedule.context import EvalContext
    from kb_eval.isolation import CORES_VAR

    ctx = EvalContext.create(EvalConfig(backend="cpp", results_dir=tmp_path))
    assert CORES_VAR not in ctx.device_env("cpu") and CORES_VAR not in ctx.build_env()
    ctx.devices = ["0"]  # as on a one-GPU machine
    expected = ",".join(map(str, sorted(set(CORES) - {pinning.timing_core("0")})))
    assert ctx.device_env("0")[CORES_VAR] == expected == ctx.build_env()[CORES_VAR]


def test_baseline_children_start_off_the_timing_cores():
    """The baseline's children too (a spare importing torch beside a launch-bound
    reference's timing moved level1/71 by 44.7 % between passes on the H100)."""
    from kb_eval.baseline.stage import child_env
    from kb_eval.isolation import CORES_VAR

    expected = ",".join(map(str, sorted(set(CORES) - {pinning.timing_core("0")})))
    assert child_env("0", [0])[CORES_VAR] == expected == child_env("0", [])[CORES_VAR]
    assert child_env("0", [0])["CUDA_VISIBLE_DEVICES"] == "0"
    assert CORES_VAR not in child_env("cpu", [])
