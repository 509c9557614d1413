"""Unit tests of the defenses, in process and fast: the tripwires, the static checks, the
parent-side rules (floor, plausibility, completeness, constant references, voided
speedups), the probes' helpers and the sweep of marker-less leftover processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from kb_eval.eval.child import integrity, probes
from kb_eval.eval.judge import rules
from kb_eval.eval.judge.score import counted_speedup, is_fast
from kb_eval.eval.judge.static import static_flags
from kb_eval.results import Flag, SampleRecord


# ------------------------------------------------------------------ tripwires
@pytest.fixture
def restore():
    """Put back whatever a test patches (by reference, captured before)."""
    import time as t

    import kb_eval.clocks as clocks
    import kb_eval.eval.child.threads as threads
    import kb_eval.timing as timing

    saved = [(t, "perf_counter_ns", t.perf_counter_ns), (torch, "allclose", torch.allclose),
             (timing, "clocks", timing.clocks), (clocks, "perf_counter", clocks.perf_counter),
             (timing.TimingStats, "of", timing.TimingStats.__dict__["of"]),
             (torch, "default_generator", torch.default_generator),
             (threads, "BUSY_WAIT_MS", threads.BUSY_WAIT_MS),
             (threads.Ledger, "device_idle", threads.Ledger.device_idle)]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    yield
    for obj, name, value in saved:
        setattr(obj, name, value)
    torch.backends.cuda.matmul.allow_tf32 = tf32


def test_tripwires_quiet_when_nothing_changes():
    snap = integrity.Snapshot()
    torch.randn(3) + 1  # ordinary work changes nothing protected
    assert snap.changes() == []


@pytest.mark.parametrize("patch,seen", [
    (lambda: setattr(time, "perf_counter_ns", lambda: 0), "time.perf_counter_ns"),
    (lambda: setattr(torch, "allclose", lambda *a, **k: True), "torch.allclose"),
    (lambda: setattr(__import__("kb_eval.timing").timing, "clocks", object()),
     "kb_eval.timing.clocks"),
    (lambda: setattr(__import__("kb_eval.clocks").clocks, "perf_counter", lambda: 0.0),
     "kb_eval.clocks.perf_counter"),
    (lambda: setattr(__import__("kb_eval.timing").timing.TimingStats, "of",
                     classmethod(lambda cls, xs: None)), "kb_eval.timing.TimingStats.of"),
    (lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
     "torch.backends.cuda.matmul.allow_tf32"),
    # the generators inputs are seeded on (inputs.seeded)
    (lambda: setattr(torch, "default_generator", torch.Generator()), "torch.default_generator"),
    # the check that the device is idle when a timed call begins (child/threads.py)
    (lambda: setattr(__import__("kb_eval.eval.child.threads").eval.child.threads,
                     "BUSY_WAIT_MS", 1e9), "kb_eval.eval.child.threads.BUSY_WAIT_MS"),
    (lambda: setattr(__import__("kb_eval.eval.child.threads").eval.child.threads.Ledger,
                     "device_idle", lambda self: None),
     "kb_eval.eval.child.threads.Ledger.device_idle"),
])
def test_tripwires_see_patches(restore, patch, seen):
    snap = integrity.Snapshot()
    patch()
    assert seen in snap.changes()


def test_tripwire_sees_code_swap(restore):
    import kb_eval.timing as timing

    snap = integrity.Snapshot()
    original = timing.time_callable.__code__
    try:
        timing.time_callable.__code__ = (lambda *a, **k: None).__code__
        assert "kb_eval.timing.time_callable" in snap.changes()
    finally:
        timing.time_callable.__code__ = original


def test_tripwires_see_timing_plan_patches(restore):
    """The timing policy (kb_eval.timing_plan, re-exported by kb_eval.timing) is watched
    as the timing module is: a function rebound there (which kb_eval.timing's names would
    not show), a swapped code object or a class attribute, by the full check and by the
    one after every timed call."""
    import kb_eval.timing_plan as plan

    snap = integrity.Snapshot()
    real_kept, code = plan.kept, plan.round_medians.__code__
    try:
        plan.kept = lambda settings, r, samples: samples[:1]
        assert "kb_eval.timing_plan.kept" in snap.changes()
        assert "kb_eval.timing_plan.kept" in snap.changes(timer_only=True)
        plan.kept = real_kept
        assert snap.changes(timer_only=True) == []
        plan.round_medians.__code__ = (lambda samples_ms, max_rounds=20: []).__code__
        assert "kb_eval.timing_plan.round_medians" in snap.changes()
        assert "kb_eval.timing_plan.round_medians" in snap.changes(timer_only=True)
        plan.round_medians.__code__ = code
        plan.TimingStats.of = classmethod(lambda cls, xs: None)
        assert "kb_eval.timing_plan.TimingStats.of" in snap.changes()
    finally:
        plan.kept = real_kept
        plan.round_medians.__code__ = code


TIMER_PATCHES = [
    (lambda: setattr(__import__("kb_eval.clocks").clocks, "perf_counter", lambda: 0.0),
     "kb_eval.clocks.perf_counter"),
    (lambda: setattr(__import__("kb_eval.timing").timing, "clocks", object()),
     "kb_eval.timing.clocks"),
    (lambda: setattr(time, "perf_counter_ns", lambda: 0), "time.perf_counter_ns"),
    (lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
     "torch.backends.cuda.matmul.allow_tf32"),
]


@pytest.mark.parametrize("patch,seen", TIMER_PATCHES)
def test_timer_tripwire_sees_timer_patches(restore, patch, seen):
    """The check after every timed call (timer_only) sees what the timer relies on, and
    says the same as the slow way would."""
    snap = integrity.Snapshot()
    assert snap.changes(timer_only=True) == []
    patch()
    assert seen in snap.changes(timer_only=True)


def test_timer_tripwire_sees_methods_code_and_lookups(restore):
    import kb_eval.timing as timing

    snap = integrity.Snapshot()
    real = timing._CpuTimer.time_one
    code = timing._CudaTimer.time_one.__code__
    own_query = vars(torch.cuda.Event).get("query")
    try:
        timing._CpuTimer.time_one = lambda self, fn, args: (0.001, fn(*args))
        assert snap.changes(timer_only=True) == ["kb_eval.timing._CpuTimer.time_one"]
        timing._CpuTimer.time_one = real
        assert snap.changes(timer_only=True) == []  # undone: as it was
        timing._CudaTimer.time_one.__code__ = (lambda self, fn, args: None).__code__
        assert snap.changes(timer_only=True) == ["kb_eval.timing._CudaTimer.time_one"]
        timing._CudaTimer.time_one.__code__ = code
        torch.cuda.Event.query = lambda self: True
        assert "torch.cuda.Event.query" in snap.changes(timer_only=True)
        # inherited from a base class: shadowing it on the class itself is seen too
        assert "__init__" not in vars(torch.cuda.Event)
        torch.cuda.Event.__init__ = lambda self, *a, **k: None
        assert "torch.cuda.Event.__init__" in snap.changes(timer_only=True)
        del torch.cuda.Event.__init__
    finally:
        timing._CpuTimer.time_one = real
        timing._CudaTimer.time_one.__code__ = code
        vars(torch.cuda.Event).get("__init__") and delattr(torch.cuda.Event, "__init__")
        if own_query is not None:
            torch.cuda.Event.query = own_query
        elif "query" in vars(torch.cuda.Event):
            del torch.cuda.Event.query
    assert snap.changes(timer_only=True) == []


def test_timer_tripwire_is_the_cheap_part():
    """The per-call check costs a fraction of the full one: the full check between calls
    slowed host-bound calls on the H100 (integrity.py)."""
    snap = integrity.Snapshot()
    assert snap._timer is not None  # every timer path resolved: the identity comparison

    def cost(timer_only: bool) -> float:
        t0 = time.perf_counter()
        for _ in range(50):
            snap.changes(timer_only)
        return time.perf_counter() - t0

    assert cost(True) < cost(False) / 4


def test_full_tripwire_check_ends_each_round():
    from kb_eval.eval.child.calls import FULL_CHECK_EVERY, round_ends
    from kb_eval.timing import TimingSettings, paired_rounds

    rounds = paired_rounds(TimingSettings(trials=100, paired_rounds=20))
    assert round_ends(rounds, 101) == {r[-1] for r in rounds} and 100 in round_ends(rounds, 101)
    unpaired = round_ends([], 11)
    assert unpaired == set(range(FULL_CHECK_EVERY - 1, 11, FULL_CHECK_EVERY)) | {10}


# ------------------------------------------------------------------ static checks
def codes(source: str) -> set[str]:
    return {f.code for f in static_flags(source)}


def test_static_kernels_recognised():
    for src in ("from torch.utils.cpp_extension import load_inline\next = load_inline('a', '')",
                "import torch.utils.cpp_extension as ce\next = ce.load(name='a', sources=[])",
                "from torch.utils.cpp_extension import load_inline as li\next = li('a', '')",
                "import triton\n@triton.jit\ndef k(x): pass",
                "from triton import jit\n@jit\ndef k(x): pass",
                "import cupy\nk = cupy.RawKernel('', 'k')"):
        assert "no_custom_kernel" not in codes(src), src
    assert "no_custom_kernel" in codes("import torch\nclass ModelNew: pass")
    assert "no_custom_kernel" in codes("import torch\nf = torch.compile(lambda x: x)")


def test_static_suspicious_and_patches():
    assert "suspicious_code" in codes("import gc\ngc.get_objects()")
    assert "suspicious_code" in codes("import sys\nsys._getframe(1)")
    assert "suspicious_code" in codes("import threading")
    assert "monkeypatch" in codes("import time\ntime.perf_counter = lambda: 0")
    assert "monkeypatch" in codes("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True")
    assert "monkeypatch" not in codes("import torch\ntorch.backends.cudnn.benchmark = True")
    assert "monkeypatch" not in codes("class A:\n    def f(self):\n        self.x = 1")
    assert static_flags("def broken(:") == []


# ------------------------------------------------------------------ parent-side rules
STATS = {"mean": 1.0, "median": 1.0, "std": 0.1, "min": 0.9, "max": 1.2, "p25": 0.95,
         "p75": 1.05, "n": 10, "unit": "ms"}


def test_busy_is_the_time_spent_spinning():
    """A spinning context's synchronize finds work pending when the thread spun through
    more than BUSY_WAIT_MS of it; time off the CPU (a host stall, a preemption) is not the
    device's. A context that sleeps while it waits is judged by the wall time, and a
    preempted wait then proves nothing. Figures from the H200 (neighbour_noise.py)."""
    from kb_eval.eval.child.threads import BUSY_WAIT_MS, busy
    from kb_eval.timing import DeviceWait

    pending, host_stall = DeviceWait(1.02, 1.03, False), DeviceWait(0.52, 0.09, False)
    assert busy(pending, spinning=True) and not busy(host_stall, spinning=True)
    # preempted midway, but it spun over the limit before or after: work was pending
    assert busy(DeviceWait(3.0, 0.8, True), spinning=True)
    assert not busy(DeviceWait(3.0, 0.2, True), spinning=True)
    # blocking sync or yield (a candidate may set it): the thread sleeps through real work
    assert busy(host_stall, spinning=False) and busy(DeviceWait(1.0, 0.05, False), False)
    assert not busy(DeviceWait(1.0, 0.05, True), spinning=False)
    at_limit = DeviceWait(BUSY_WAIT_MS, BUSY_WAIT_MS, False)
    assert not busy(at_limit, True) and not busy(at_limit, False)


def test_no_cuda_context_is_no_spinning_context():
    """Without a CUDA context on this thread (a CPU machine, or no driver) the flags cannot
    be read, and the wall-time rule applies."""
    from kb_eval.eval.child.threads import waits_spinning

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("a CUDA context is current here")
    assert waits_spinning() is False


def test_timing_plausibility():
    assert rules.timing_plausible(STATS, 10) == []
    assert rules.timing_plausible({**STATS, "n": 100}, 10)[0].code == "implausible_timing"
    assert rules.timing_plausible({**STATS, "min": 2.0}, 10)
    assert rules.timing_plausible({**STATS, "median": float("nan")}, 10)
    assert rules.timing_plausible({"median": 1}, 10)


def test_physical_floor():
    m = {"in_bytes": 48e6, "out_bytes": 48e6, "l2_bytes": 50e6, "empty_call_ms": 0.004,
         "copy_bytes_per_s": None}
    # 48 MB from DRAM at 4.8 TB/s = 10 us; half of it is the floor
    assert rules.physical_floor(0.006, m, "cuda", "NVIDIA H200", True) == []
    [f] = rules.physical_floor(0.004, m, "cuda", "NVIDIA H200", True)
    assert f.code == "below_physical_floor" and f.severity == "error"
    assert rules.physical_floor(0.004, m, "cuda", "NVIDIA H200", False) == []  # no flush
    assert rules.physical_floor(0.001, m, "cpu", "x86_64", True)  # below half an empty call
    assert rules.physical_floor(0.003, m, "cpu", "x86_64", True) == []
    unknown = {**m, "copy_bytes_per_s": 1e12}  # measured 1 TB/s -> ceiling 1.5 TB/s
    assert rules.physical_floor(0.012, unknown, "cuda", "Some GPU", True)
    assert rules.physical_floor(0.02, unknown, "cuda", "Some GPU", True) == []
    assert rules.physical_floor(0.001, {"error": "x"}, "cuda", "NVIDIA H200", True) == []


def test_completeness_and_constant_reference():
    assert rules.completeness(8, ["t"] * 8, True) == []
    assert rules.completeness(8, ["t"] * 7, True)[0].code == "timed_recheck_missing"
    assert rules.completeness(8, [], False) == []
    same = {"correct_0": {}, **{f"correct_{i}": {"same_as_first": True} for i in (1, 2)}}
    assert rules.constant_reference(same, list(same))[0].code == "constant_reference"
    differ = {**same, "correct_2": {"same_as_first": False}}
    assert rules.constant_reference(differ, list(differ)) == []
    assert rules.constant_reference({"correct_0": {}}, ["correct_0"]) == []


def test_child_flags():
    result = {"tampered": [{"where": "load", "what": ["time.perf_counter"]}],
              "inputs_tampered": ["correct_1"], "timed_aliased": [3], "threads": ["t#1"]}
    assert {f.code for f in rules.child_flags(result)} == {
        "tampered", "inputs_tampered", "output_aliases_input", "python_threads"}
    assert rules.child_flags({"tampered": [], "threads": []}) == []


def test_voided_speedup_not_counted():
    base = dict(key="k", status="correct", correct=True, speedup=3.0)
    plain = SampleRecord(**base)
    voided = SampleRecord(**base, flags=[Flag(code="no_custom_kernel", severity="warning")])
    other = SampleRecord(**base, flags=[Flag(code="suspicious_code", severity="warning")])
    assert counted_speedup(plain) == 3.0 and is_fast(plain, 1.0)
    assert counted_speedup(voided) is None and not is_fast(voided, 0.0)
    assert counted_speedup(other) == 3.0


# ------------------------------------------------------------------ probes
def test_same_tensor_bitwise():
    a = torch.randn(4, 5)
    a[0, 0] = float("nan")
    assert probes.same_tensor(a, a.clone()) and probes.same_tensor(a.t(), a.clone().t())
    b = a.clone()
    b[1, 1] += 1e-3
    assert not probes.same_tensor(a, b)
    assert probes.same_tensor(a.bfloat16(), a.bfloat16().clone())
    assert not probes.same_tensor(a, a.double())


def test_probe_inputs_and_regeneration():
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    px, py, k = probes.probe_inputs([x, y, 3])
    assert px.shape == (7, 4) and py.shape == (7, 2) and k == 3
    assert probes.probe_inputs([torch.randn(5)]) is None  # no batch dimension
    assert probes.probe_inputs([torch.randn(1, 4)]) is None
    # inputs over PROBE_MAX_BYTES: about as many rows as fit, at least two (one of two)
    gib = 1 << 30
    assert probes.probe_batch(8, gib) == 7 and probes.probe_batch(112, 7 * gib) == 16
    assert probes.probe_batch(16, 16 * gib) == 2 and probes.probe_batch(2, 64 * gib) == 1
    assert probes.probe_batch(4, gib + 1) == 3  # nothing fewer fits better than one smaller


def test_a_large_problem_is_probed_on_fewer_rows(monkeypatch):
    monkeypatch.setattr(probes, "PROBE_MAX_BYTES", 64 * 4 * 10)  # ten rows of x and y
    x, y = torch.randn(40, 32), torch.randn(40, 32)
    px, py, w = probes.probe_inputs([x, y, torch.randn(3, 3)])
    assert px.shape == (10, 32) and py.shape == (10, 32) and w.shape == (3, 3)
    assert px.data_ptr() == x.data_ptr()  # a view: nothing drawn again

    class M:
        @staticmethod
        def get_inputs():
            return [torch.randn(3, 3)]

    s = probes.fresh_seed()
    first = probes.regenerate(M, s, torch.device("cpu"), torch.float32)
    again = probes.regenerate(M, s, torch.device("cpu"), torch.float32)
    assert probes.changed_inputs(first, again) == []
    first[0].add_(1)
    assert probes.changed_inputs(first, again) == [0]


def _settle(tensors):
    saved = []
    calm = probes.settled(tensors, torch.device("cpu"), 0.0, lambda ts: saved.extend(ts))
    return calm, saved


def _write_while_it_waits(monkeypatch, tensor: torch.Tensor) -> None:
    """A write that lands after the call returned, during settled's wait: done from the
    wait itself, so that it lands there whatever the machine's load (a timer thread may
    not run in time on a busy machine)."""
    real = probes.clocks.sleep

    def sleep(seconds: float) -> None:
        tensor.fill_(1.0)
        real(seconds)

    monkeypatch.setattr(probes.clocks, "sleep", sleep)


def test_settled_sees_late_writes(monkeypatch):
    out = torch.zeros(4)
    calm, snap = _settle([out])
    assert calm and probes.same_tensor(snap[0], out)

    late = torch.zeros(4)
    _write_while_it_waits(monkeypatch, late)
    calm, snap = _settle([late])
    assert not calm and snap[0].sum() == 0  # judged as the call left it


def test_settled_large_outputs_by_fingerprint(monkeypatch):
    """Outputs over the snapshot size are fingerprinted, not cloned: a late write is still
    seen."""
    monkeypatch.setattr(probes, "SNAPSHOT_MAX_BYTES", 8)
    out = torch.zeros(64)
    assert _settle([out])[0]
    late = torch.zeros(64)
    _write_while_it_waits(monkeypatch, late)
    assert not _settle([late])[0]


def test_settled_large_outputs_against_their_saved_copy(monkeypatch):
    """Outputs over the snapshot size saved into the server's buffer (a CPU tensor stands
    in for it here) are compared with that copy after the wait, no fingerprint taken: a
    late write is seen, and the copy is what the call left."""
    monkeypatch.setattr(probes, "SNAPSHOT_MAX_BYTES", 8)
    monkeypatch.setattr(probes, "fingerprints", None)  # never called on this path
    buffers = []

    def save(ts):
        buffers.append([t.reshape(-1).view(torch.uint8).clone() for t in ts])
        return buffers[-1]

    assert probes.settled([torch.zeros(64)], torch.device("cpu"), 0.0, save, lambda ts: True)
    late = torch.zeros(64)
    _write_while_it_waits(monkeypatch, late)
    assert not probes.settled([late], torch.device("cpu"), 0.0, save, lambda ts: True)
    assert buffers[-1][0].view(torch.float32).sum() == 0


def test_fingerprint_sees_any_change_and_moves():
    a = torch.randn(1000)
    assert probes.fingerprint(a) == probes.fingerprint(a.clone())
    swapped = a.clone()
    swapped[3], swapped[4] = a[4].item(), a[3].item()  # same sum, elements moved
    assert probes.fingerprint(swapped) != probes.fingerprint(a)
    one_ulp = a.clone()
    one_ulp[7] = torch.nextafter(a[7], torch.tensor(float("inf")))
    assert probes.fingerprint(one_ulp) != probes.fingerprint(a)
    assert probes.fingerprint(a.double()) != probes.fingerprint(a)  # dtype is part of it
    assert probes.changed_since([a, 3], probes.fingerprints([a, 3])) == []
    assert probes.changed_since([swapped], probes.fingerprints([a])) == [0]


def test_same_outputs_is_bit_identity():
    a = torch.randn(3, 3)
    assert probes.same_outputs([a], [a.clone()])
    assert not probes.same_outputs([a], [a.t().contiguous()])
    assert not probes.same_outputs([torch.tensor(1.0)], [torch.tensor([1.0])])
    nan = torch.tensor([float("nan")])
    assert probes.same_outputs([nan], [nan.clone()]) and not probes.same_outputs([a], [a, a])


def test_into_buffers_keeps_addresses():
    bufs = [torch.zeros(4), 3]
    fresh = [torch.ones(4), 3]
    got = probes.into_buffers(bufs, fresh)
    assert got is bufs and got[0].data_ptr() == bufs[0].data_ptr() and got[0].sum() == 4
    assert probes.into_buffers(bufs, [torch.ones(5), 3])[0].shape == (5,)  # no fit: fresh
    assert probes.into_buffers(bufs, [torch.ones(4), 4])[1] == 4
    assert probes.into_buffers(None, fresh) is fresh


# ------------------------------------------------------------------ leftover processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")
def test_sweep_kills_marker_less_escapee_only():
    from kb_eval.eval.schedule.reaper import sweep_escapees
    from kb_eval.isolation import _become_subreaper

    _become_subreaper()
    token = f"kb-sweep-{os.getpid()}-{time.monotonic_ns()}"
    same_session = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(30)  # {token}"])
    # An intermediate that starts a setsid'ed, env-cleared sleeper and exits: the sleeper
    # re-parents to us (subreaper), in a session of its own, without any marker.
    subprocess.run([sys.executable, "-c",
                    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                    f"'import time; time.sleep(30)  # {token}'], env={{}}, "
                    "start_new_session=True)"], check=True)
    try:
        time.sleep(0.3)
        killed = sweep_escapees(min_age_s=0.1)
        assert len(killed) == 1
        assert same_session.poll() is None  # our own session's child is left alone
    finally:
        same_session.kill()
        same_session.wait()


def test_outside_work_names_the_threads_alive():
    """A thread that burns CPU between calls is charged to the candidate, and the flag names
    the threads still alive with their CPU, busiest first (to tell a candidate's worker from
    a library's)."""
    import threading

    from kb_eval.eval.child.threads import Ledger
    from kb_eval.eval.judge.verdict import outside_work

    ledger = Ledger(torch.device("cpu"))
    ledger.call_starts()
    ledger.call_ended()
    stop = threading.Event()

    def burn():
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        stop.wait()

    worker = threading.Thread(target=burn)
    worker.start()
    time.sleep(0.3)
    try:
        report = ledger.report()
    finally:
        stop.set()
        worker.join()
    assert report["outside_ms"] >= 40, report
    [flag] = outside_work(report)
    # Python 3.11 does not name the OS thread: it shows as the process's name.
    alive = flag.message.split("its threads alive: ")[1]
    assert flag.code == "work_outside_call" and float(alive.split(": ")[1].split()[0]) >= 40
    assert outside_work({**report, "outside_ms": 0.0}) == []



def test_a_timed_call_waits_for_the_candidates_busy_thread_and_counts_the_wait():
    """drain: a call is not over while a thread the candidate started still uses CPU; the
    wait is counted (a copy of the reference should show none: the child's `drain` step)."""
    import threading

    from kb_eval.eval.child.threads import Ledger

    ledger = Ledger(torch.device("cpu"))
    ledger.call_starts()
    ledger.call_ended()
    ledger.drain()
    assert ledger.drain_ns == 0  # no thread of the candidate's: nothing waited
    busy = threading.Event()

    def burn():
        busy.set()
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    busy.wait()
    ledger.call_ended()  # the thread exists at the call's end: drain is armed
    t0 = time.perf_counter()
    ledger.drain()
    waited = time.perf_counter() - t0
    worker.join()
    assert waited >= 0.05 and ledger.drain_ns >= 0.05e9, (waited, ledger.drain_ns)


def test_the_empty_call_floor_is_the_fastest_empty_call(monkeypatch):
    """A host preempted during some of the 30 empty calls (the server measures them
    beside the builds) must not raise the floor above what the timer can do."""
    from kb_eval.timing import TimingSettings, TimingStats

    seen = []

    def timed(fn, settings, device, args):
        seen.append(settings.trials)
        fn(*args(0))
        return TimingStats.of([0.02] + [0.16] * 29)  # one quiet call, 29 preempted

    monkeypatch.setattr(probes, "time_callable", timed)
    assert probes.empty_call_ms(torch.device("cpu"), TimingSettings(), []) == 0.02
    assert seen == [30]
