"""Timing on a CUDA GPU: work left on a side stream is counted; another process's kernels
are seen."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest
import torch

from kb_eval.timing import TimingSettings, busy_ms_before_quiet, time_callable, time_samples

pytestmark = pytest.mark.gpu
SETTINGS = TimingSettings(warmup=3, trials=30)


def _matmuls(a, b, n=4):
    for _ in range(n):
        a @ b


def test_side_stream_work_is_timed_at_its_true_cost():
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def on_side_stream():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _matmuls(a, b)

    main = time_callable(lambda: _matmuls(a, b), SETTINGS, "cuda").median
    hidden = time_callable(on_side_stream, SETTINGS, "cuda").median
    assert main > 1.0  # ms: the check below is meaningful only for real work
    assert hidden == pytest.approx(main, rel=0.10), (hidden, main)
    # Plain events on the current stream would have seen almost nothing of it.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    on_side_stream()
    end.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) < 0.5 * main


def test_a_host_slow_to_wait_adds_nothing_to_an_honest_call():
    """With the host idle 5 ms before each call, the device-wide wait after a 1 GiB call's
    end took 0.02-0.07 ms on an idle H100, over the calibrated limit for about half the
    calls, which were then timed up to an event recorded after the wait (~0.13 ms more).
    Charged now by the wait's excess alone: the idle-before calls time as the prompt
    ones, and a side stream's late work is still counted (the test above)."""
    x = torch.rand(1 << 28, device="cuda")  # 1 GiB: a ~0.7 ms memory-bound call
    settings = TimingSettings(warmup=3, trials=200)

    def idle_first(i):
        time.sleep(0.005)  # outside the clock: the host idles, the GPU too
        return (x,)

    prompt = time_samples(lambda a: a * 3.14, settings, "cuda", lambda i: (x,))[0]
    idled = time_samples(lambda a: a * 3.14, settings, "cuda", idle_first)[0]
    fastest = min(prompt + idled)
    slow = sum(t > fastest + 0.05 for t in idled) / len(idled)
    assert statistics.median(idled) == pytest.approx(statistics.median(prompt), rel=0.01)
    assert slow < 0.05, (slow, statistics.median(idled), fastest)


def test_the_host_path_to_a_calls_first_kernel_is_not_timed():
    """A call that spends 0.15 ms of host time before its one kernel (a Python layer, a
    slow host) times as its kernel with the launch cover, and ~0.1 ms more without it
    (the flush hides ~0.05 ms): the host's pace no longer moves the figure."""
    x = torch.randn(1 << 26, device="cuda")  # 256 MB: a ~0.2 ms memory-bound kernel

    def slow_host():
        t_end = time.perf_counter() + 150e-6
        while time.perf_counter() < t_end:
            pass
        return x.mul(2)

    covered = time_callable(slow_host, SETTINGS, "cuda").median
    prompt = time_callable(lambda: x.mul(2), SETTINGS, "cuda").median
    bare = time_callable(slow_host, SETTINGS.model_copy(update={"launch_cover_ms": 0}),
                         "cuda").median
    assert covered == pytest.approx(prompt, abs=0.01), (covered, prompt)
    assert bare > prompt + 0.05, (bare, prompt)


def test_a_stopped_process_kernels_keep_the_gpu_busy_until_they_end():
    """What the reference server relies on before each paired round: its synchronize does
    not see another process's kernels, but a probe of its own waits behind them."""
    assert busy_ms_before_quiet(torch.device("cuda")) < 1.0  # nothing else runs
    queue = ("import sys, torch\n"
             "torch.cuda._sleep(1 << 20); torch.cuda.synchronize()\n"
             "torch.cuda._sleep(int(2e9))\n"  # ~1 s of GPU spin at H100 clocks
             "print('queued', flush=True); sys.stdin.read()\n")
    other = subprocess.Popen([sys.executable, "-c", queue], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "queued"
        os.kill(other.pid, signal.SIGSTOP)  # as the pairing stops a candidate
        busy = busy_ms_before_quiet(torch.device("cuda"))
        assert busy > 100, busy
    finally:
        os.kill(other.pid, signal.SIGCONT)
        other.kill()
        other.wait()


def test_launch_time_tells_a_launch_bound_call_from_a_gpu_bound_one():
    """`launch_ms` is the host's time to launch a call: far below the call's time when the
    GPU does the work, the call's whole time when the host does (many tiny kernels)."""
    x = torch.zeros(1, device="cuda")

    def gpu_bound():
        torch.cuda._sleep(2_000_000)  # ~1 ms of GPU spinning, launched in microseconds

    def launch_bound():
        for _ in range(300):
            x.add_(1)

    gpu = time_callable(gpu_bound, SETTINGS, "cuda")
    host = time_callable(launch_bound, SETTINGS, "cuda")
    assert gpu.launch_ms is not None and gpu.launch_ms < 0.2 * gpu.median, gpu
    assert host.launch_ms is not None and host.launch_ms > 0.8 * host.median, host


def test_baseline_launches_from_the_pairing_core_and_records_the_gpu_state(tmp_path):
    """A baseline's timed calls are launched from the core the eval's pairing uses for the
    GPU (a launch-bound reference is timed at one host speed), and the record says what
    the GPU did meanwhile (clock, temperature, slowdowns) when NVML can be read."""
    from kb_eval.eval.schedule import pinning

    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    (level / "1_relu.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n"
        "def get_inputs():\n    return [torch.randn(4096, 4096)]\n"
        "def get_init_inputs():\n    return []\n")
    out = tmp_path / "b.json"
    r = subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--quiet", "--source",
                        str(tmp_path / "probs"), "--trials", "20", "--output", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    record = json.loads(out.read_text())["records"]["local-probs/level1/1"]
    assert record["status"] == "ok"
    assert record["core"] == pinning.timing_core("0")
    try:
        import pynvml  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-ml-py is not installed: no GPU state to check")
    before, after = record["gpu"]["before"], record["gpu"]["after"]
    assert before["sm_mhz"] > 0 and after["sm_mhz"] > 0 and after["temp_c"] > 0
    assert isinstance(after["slowdowns"], list)


def test_inputs_drawn_on_the_gpu_are_those_torch_manual_seed_gave():
    """inputs.seeded seeds the CPU's generator and a state of ours on the device (not
    torch.manual_seed, whose lazy seeding of other accelerators cost 45 ms a sample):
    same values."""
    from kb_eval.inputs import make_inputs

    def get_inputs():
        return [torch.randn(64, 33), torch.rand(7), torch.randint(0, 9, (5,)),
                torch.randn(3, device="cpu")]

    torch.empty(1, device="cuda")  # CUDA started, as in every child that draws
    for seed in (0, 12345, 2 ** 62 + 7):
        ours = make_inputs(get_inputs, seed, "cuda:0", torch.float32)
        torch.manual_seed(seed)
        with torch.device("cuda:0"):
            theirs = get_inputs()
        assert [t.device.type for t in ours] == ["cuda", "cuda", "cuda", "cpu"]
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b)


def test_a_paired_timings_timer_is_made_on_its_short_spin_up_and_calibrated():
    """A paired timing's first timer spins the GPU for the round's spin-up (at least
    ROUND_TIMER_FIRST_SPIN_S), not the 30 ms a baseline's timer takes, and still comes
    out calibrated: a sync latency, and a launch cover sized from the clock it measured."""
    from kb_eval import timing

    device = torch.device("cuda", torch.cuda.current_device())
    settings = TimingSettings()
    made_s = []
    for spin_ms, first_s in ((settings.round_spin_up_ms, None), (None, 0.03)):
        timing._TIMERS.clear()
        timing._CudaTimer._calibration.clear()
        timing._CudaTimer._cycles_per_ms.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if spin_ms is not None:
            timer = timing.round_timer(device, settings)
        else:
            timer = timing.timer_for(device, cover_ms=settings.launch_cover_ms,
                                     first_spin_s=first_s)
        made_s.append(time.perf_counter() - t0)
        assert timer.latency[0] > 0 and timer.cover_cycles > 0
    paired, baseline = made_s
    assert paired < baseline - 0.02, made_s  # the baseline's 30 ms spin-up, less 2
    timing._TIMERS.clear()
