"""Speed of light: each problem's work counted by hand on three bundled problems, the
machine's peaks measured (CPU here; the GPU's in the `gpu` test), and a correct sample
whose time is above the speed of light never counted (a forged time), beside an honest
one that is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kb_eval.eval.judge.score import counted_speedup, counted_sol, summarize
from kb_eval.eval.judge.sol import FLAG, judge_sol, must_bytes
from kb_eval.harness import load_module
from kb_eval.peaks import PeaksFile, measure, peaks_path, read_peaks, write_peaks
from kb_eval.results import HardwareInfo, SampleRecord
from kb_eval.timing import TimingStats
from kb_eval.work import count_work

REPO = Path(__file__).resolve().parents[1]
OPS = REPO / "reference_kernels" / "problems" / "ops" / "level1"
F32 = 4


def _work(name: str, precision: str = "fp32"):
    return count_work(load_module((OPS / name).read_text(), "kb_problem"), precision)


def test_work_by_hand_matmul_elementwise_conv():
    n = 4096  # C = A @ B: 2 N^3 FLOPs; A, B in, C out
    mm = _work("1_matmul_square.py")
    assert mm.flops == 2 * n ** 3 and mm.counted_on == "meta"
    assert (mm.in_bytes, mm.weight_bytes, mm.out_bytes) == (2 * n * n * F32, 0, n * n * F32)
    assert mm.bytes == 3 * n * n * F32 and mm.intensity == pytest.approx(2 * n / 12)
    relu = _work("15_relu.py")  # elementwise: no counted FLOPs, x in, y out
    assert relu.flops == 0 and relu.bytes == 2 * 4096 * 8192 * F32
    # Conv2d 64 -> 128, 3x3, padding 1 on (32, 64, 56, 56): 2 MACs-worth per tap
    conv = _work("20_conv2d.py")
    assert conv.flops == 2 * 32 * 128 * 56 * 56 * 64 * 3 * 3
    assert conv.in_bytes == 32 * 64 * 56 * 56 * F32
    assert conv.weight_bytes == 128 * 64 * 3 * 3 * F32
    assert conv.out_bytes == 32 * 128 * 56 * 56 * F32
    assert _work("20_conv2d.py", "bf16").bytes == conv.bytes // 2  # 2-byte elements


def test_work_falls_back_to_a_real_forward():
    """An op with no meta kernel (a data-dependent shape) is counted on the real model."""
    code = ("import torch\nclass Model(torch.nn.Module):\n"
            "    def forward(self, x):\n        return torch.nonzero(x > 0).float() @ "
            "torch.ones(2, 3)\n"
            "def get_inputs():\n    return [torch.tensor([[1.0, -1.0], [2.0, 3.0]])]\n"
            "def get_init_inputs():\n    return []\n")
    module = load_module(code, "kb_problem")
    model, x = module.Model(), module.get_inputs()
    work = count_work(module, "fp32", lambda: (model, x), "cpu")
    assert work.counted_on == "cpu" and work.flops == 2 * 3 * 2 * 3  # (3x2) @ (2x3)
    assert work.out_bytes == 3 * 3 * F32
    assert count_work(module, "fp32").error.startswith("meta:")  # no fallback given


@pytest.fixture(scope="module")
def cpu_peaks(tmp_path_factory) -> PeaksFile:
    root = tmp_path_factory.mktemp("results")
    hw = HardwareInfo.detect("cpu")
    peaks = write_peaks(root, measure("cpu"), hw)
    assert read_peaks(peaks_path(root, "cpu"), hw) == peaks  # kept beside the baselines
    other = hw.model_copy(update={"name": "another CPU"})
    assert read_peaks(peaks_path(root, "cpu"), other) is None  # measured again there
    return peaks


def test_cpu_peaks_measured(cpu_peaks):
    p = cpu_peaks
    assert p.copy_bytes_per_s > 1e8 and p.read_bytes_per_s > 1e8
    assert p.bandwidth == max(p.copy_bytes_per_s, p.read_bytes_per_s)
    assert p.matmul_flops_per_s["fp32"] > 1e8 and p.matmul_peak("bf16") > 0
    assert p.cache_bytes is None or p.cache_bytes > 0
    assert "tf32" not in p.matmul_flops_per_s  # a GPU figure


def test_peaks_cli_writes_the_file(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--peaks", "--device",
                           "cpu", "--results-dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((tmp_path / "baseline" / "cpu" / "peaks.json").read_text())
    assert data["kind"] == "peaks" and data["matmul_flops_per_s"]["fp32"] > 0
    assert "bandwidth" in done.stdout and "peaks.json" in done.stdout


def _stats(ms: float) -> TimingStats:
    return TimingStats.of([ms] * 10)


def _judged(ms: float, peaks: PeaksFile, flushed: bool, name="15_relu.py",
            reference_ms: float | None = None) -> SampleRecord:
    """A correct sample of `name` timed at `ms` (the reference at `reference_ms`, default
    4 x `ms`), judged as verdict.judge_sample does."""
    r = SampleRecord(key=f"ops/level1/{name.split('_')[0]}", level=1, status="correct",
                     correct=True, compiled=True, timing=_stats(ms),
                     baseline=_stats(reference_ms or 4 * ms))
    r.speedup = r.baseline.median / ms
    judge_sol(r, {"work": _work(name).model_dump(), "peaks": peaks.model_dump()}, "fp32",
              flushed)
    return r


def _gpu_like(peaks: PeaksFile) -> PeaksFile:
    """The measured CPU figures, with a GPU's L2 (the flush rule's case)."""
    return peaks.model_copy(update={"cache_bytes": 8 << 20})


def test_forged_time_above_speed_of_light_not_counted(cpu_peaks):
    peaks = _gpu_like(cpu_peaks)
    work = _work("15_relu.py")
    light_ms = must_bytes(work, peaks.cache_bytes) / peaks.bandwidth * 1e3
    honest = _judged(2 * light_ms, peaks, True)
    forged = _judged(light_ms / 3, peaks, True, reference_ms=8 * light_ms)
    assert honest.sol.byte_share == pytest.approx(work.bytes / peaks.bandwidth / (
        2 * light_ms / 1e3))
    assert honest.sol.share < 1 and honest.sol.bound == "memory"
    assert honest.sol.reference_share == pytest.approx(honest.sol.share / 4)
    assert [f.code for f in honest.flags] == [] and counted_sol(honest) == honest.sol.share
    assert forged.sol.share > 1 and [f.code for f in forged.flags] == [FLAG]
    assert forged.correct and counted_speedup(forged) is None and counted_sol(forged) is None
    keys = [honest.key]
    s_honest = summarize([honest], keys)
    s_forged = summarize([forged.model_copy(update={"key": honest.key})], keys)
    assert s_honest.fast_p["fast_1"] == 1.0 and s_honest.sol_p["sol_0.25"] == 1.0
    assert s_forged.fast_p["fast_0"] == 0.0 and s_forged.sol_p["sol_0.1"] == 0.0
    assert s_forged.correct_rate == 1.0  # correct, never a win


def test_cpu_share_above_one_reported_not_counted(cpu_peaks):
    """No flush on a CPU: a share above 1 (data in its caches) is no proof of a forged
    time, so no flag; it is never counted in sol_p."""
    work = _work("15_relu.py")
    fast = _judged(work.bytes / cpu_peaks.bandwidth * 1e3 / 2, cpu_peaks, False)
    assert fast.sol.share == pytest.approx(2.0) and fast.flags == []
    assert counted_speedup(fast) is not None and counted_sol(fast) is None


def test_flop_share_above_one_is_no_floor(cpu_peaks):
    """FLOPs are not a floor (an algebraic shortcut is legitimate): a matmul timed faster
    than the FLOP peak allows, with its bytes under the bandwidth, is not flagged."""
    peaks = _gpu_like(cpu_peaks)
    work = _work("1_matmul_square.py")
    ms = max(work.flops / peaks.matmul_peak("fp32") / 10,
             2 * must_bytes(work, peaks.cache_bytes) / peaks.bandwidth) * 1e3
    r = _judged(ms, peaks.model_copy(update={"matmul_flops_per_s": {
        "fp32": work.flops / (ms / 1e3) / 4}}), True, "1_matmul_square.py")
    assert r.sol.flop_share == pytest.approx(4.0) and r.sol.bound == "compute"
    assert r.flags == [] and counted_sol(r) is None and counted_speedup(r) is not None


@pytest.mark.gpu
def test_gpu_peaks_measured():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    p = PeaksFile(produced_by={"tool": "test"}, hardware=HardwareInfo.detect("cuda"),
                  **measure("cuda"))
    rates = p.matmul_flops_per_s
    assert {"fp32", "tf32", "bf16", "fp16"} <= rates.keys(), p.errors
    assert rates["bf16"] > rates["tf32"] > rates["fp32"]  # tensor cores, TF32 off is SIMT
    assert p.copy_bytes_per_s > 5e11 and p.cache_bytes > 0
    print(p.model_dump_json(indent=1))


def test_a_cpu_eval_measures_its_peaks_before_the_builds(tmp_path, build_cache_dir):
    """On a CPU the compilers share the cores: an eval without a peaks file measures them
    once, before its builds, and its records are judged against that file; a later eval
    on the same results folder reuses it."""
    from adversarial.evalrun import run_eval

    paired = REPO / "tests" / "paired"
    entry = [("copy", "level1/2", paired / "candidates" / "softmax_copy.py")]
    res = tmp_path / "res"
    line = "measuring this machine's peaks once, before the builds start"
    proc, rec, _ = run_eval(entry, backend="cpp", results_dir=res, cache_dir=build_cache_dir,
                            problems=paired / "problems", args=("--jobs", "1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count(line) == 1, proc.stderr[-3000:]
    peaks = read_peaks(peaks_path(res, "cpu"), HardwareInfo.detect("cpu"))
    assert peaks is not None and peaks.matmul_flops_per_s["fp32"] > 0
    assert rec["copy"]["sol"]["bandwidth_bytes_per_s"] == pytest.approx(peaks.bandwidth)
    again, _, _ = run_eval(entry, backend="cpp", results_dir=res, cache_dir=build_cache_dir,
                           problems=paired / "problems", args=("--jobs", "1", "--run", "r2"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert line not in again.stderr
