"""The fused Triton comparisons (kb_eval/eval/judge/fused.py) against the torch code they
stand in for on a GPU: the same Diff and float64 verdicts on random outputs of every
loadable dtype (NaN and Inf in out, ref and truth; exact zeros; values from tiny to
huge; right and wrong answers; sizes off the block; one past 2^24; the candidate's
outputs in host memory). Counts, maxima and messages equal; sums to 1e-12. On a CPU: the
switch, and that CPU tensors never reach the kernels."""

from __future__ import annotations

import math

import pytest
import torch

from kb_eval.eval.judge import correctness, fused, truth
from kb_eval.eval.judge.correctness import compare_tensor
from kb_eval.eval.judge.truth import K, UNIT_ROUNDOFF, compare_truth


def on_gpu(test):
    """Marked `gpu`, skipped without CUDA or Triton."""
    test = pytest.mark.skipif(fused.triton is None, reason="needs Triton")(test)
    test = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test)
    return pytest.mark.gpu(test)


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
SIZES = (1, 3, 2047, 2048, 2049, 6145, 65_536, 100_003, 1_000_001)
TOLS = ((1e-2, 1e-2), (1e-4, 1e-4), (1e-5, 1e-5), (0.0, 0.0), (1e-3, 0.0), (0.0, 1e-3))
SPREAD = {torch.float16: 3, torch.bfloat16: 20, torch.float32: 20, torch.float64: 150}
SPECIALS = (float("nan"), float("inf"), float("-inf"))
SUMS = {"sum_abs", "ratio", "norm_ratio"}  # summation order (ratio: through S and M)


def _same(a, b, close=()) -> None:
    """Equal (NaN to NaN, and of the same type); at the keys or indices in `close` (sums)
    to 1e-12."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        keys = list(a)
    else:
        assert len(a) == len(b)
        keys = range(len(a))
    for k in keys:
        x, y = a[k], b[k]
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), (k, x, y)
        elif k in close:
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0), (k, x, y)
        else:
            assert x == y and type(x) is type(y), (k, x, y)


def _case(seed: int, n: int, dtype: torch.dtype, device="cuda"):
    """(out, ref, truth): truth float64 over many decades with exact zeros, ref its
    rounding plus an error of its own, out ref off by a level that goes from exact to
    far beyond any tolerance, and NaN/Inf sprinkled (some at the same place in out and
    ref, where they are allowed)."""
    g = torch.Generator(device=device).manual_seed(seed)
    f64 = dict(generator=g, device=device, dtype=torch.float64)

    def rand():
        return torch.rand(n, **f64)

    level = (0.0, 1e-9, 1e-5, 1e-3, 1e-1, 1.0)[seed % 6]
    t = torch.randn(n, **f64) * 10.0 ** ((rand() * 2 - 1) * SPREAD[dtype])
    zero = rand() < 0.05
    t[zero] = 0.0
    ref = (t * (1 + 1e-3 * torch.randn(n, **f64))).to(dtype)
    out = (ref.double() * (1 + level * torch.randn(n, **f64))).to(dtype)
    out[zero] = ref[zero]
    rate = (0.0, 1e-3, 2e-2)[seed % 3]
    for x in (out, ref, t):
        for v in SPECIALS:
            x[rand() < rate / 3] = v
    for v in SPECIALS:  # the same special in both: allowed
        at = rand() < rate / 3
        ref[at], out[at] = v, v
    return out, ref, t


def _both(fn, monkeypatch):
    """fn() by the fused path and by the torch code (the switch off)."""
    monkeypatch.delenv(fused.ENV, raising=False)
    got = fn()
    monkeypatch.setenv(fused.ENV, "0")
    want = fn()
    monkeypatch.delenv(fused.ENV)
    return got, want


def _check_all(out, ref, t, atol, rtol, monkeypatch) -> None:
    """Both rules through their public functions, then the statistics each pass gives,
    the truth check with the same S and M (so its maxima must be equal too)."""
    got, want = _both(lambda: compare_tensor(out, ref, atol, rtol).as_dict(), monkeypatch)
    _same(got, want, SUMS)
    got, want = _both(lambda: compare_truth(out, ref, t), monkeypatch)
    _same(got, want, SUMS)
    o, r, tf = truth._flat(out), truth._flat(ref), truth._flat(t)
    assert fused.enabled(r, o, tf)
    ku = K * UNIT_ROUNDOFF[r.dtype]
    stats = fused.kb_stats(o, r, atol, rtol, correctness.CHUNK, ku)
    _same(stats, correctness.kb_stats_torch(o, r, atol, rtol, ku), close={1, 8, 9})
    e2, t2, n = fused.scales(r, tf, truth.CHUNK)
    _same((e2, t2, n), truth._scales_torch(r, tf), close={0, 1})
    s, m = ((e2 / n) ** 0.5, (t2 / n) ** 0.5) if n else (0.0, 0.0)
    u = UNIT_ROUNDOFF[r.dtype]
    _same(fused.truth_check(o, r, tf, s, m, u, K, truth.CHUNK),
          truth._check_torch(o, r, tf, s, m, u), close={1})


@on_gpu
@pytest.mark.parametrize("seed", range(48))
def test_random_cases_agree(seed, monkeypatch):
    dtype = DTYPES[seed % 4]
    n = SIZES[seed % len(SIZES)]
    atol, rtol = TOLS[seed % len(TOLS)]
    _check_all(*_case(seed, n, dtype), atol, rtol, monkeypatch)


@on_gpu
def test_past_2_24_and_outputs_in_host_memory(monkeypatch):
    """More than one chunk of each rule; then the candidate's outputs (and the truth) in
    host memory, pinned as the server's staging buffer and not, copied chunk by chunk."""
    out, ref, t = _case(7, (1 << 24) + 4097, torch.float32)
    _check_all(out, ref, t, 1e-4, 1e-4, monkeypatch)
    _check_all(out.cpu().pin_memory(), ref, t.cpu(), 1e-4, 1e-4, monkeypatch)
    out, ref, t = _case(8, 3 * (1 << 20) + 5, torch.bfloat16)
    _check_all(out.cpu(), ref, t, 1e-2, 1e-2, monkeypatch)


@on_gpu
def test_complex_strided_and_empty(monkeypatch):
    out, ref, t = _case(9, 2 * 50_001, torch.float32)
    c = [torch.view_as_complex(x.reshape(-1, 2)) for x in (out, ref, t)]
    assert c[0].dtype == torch.complex64 and c[2].dtype == torch.complex128
    _check_all(*c, 1e-4, 1e-4, monkeypatch)
    _check_all(out[::3], ref[::3], t[::3], 1e-4, 1e-4, monkeypatch)  # 1-D, not contiguous
    _check_all(out[:0], ref[:0], t[:0], 1e-4, 1e-4, monkeypatch)


@on_gpu
def test_on_the_bound_exactly(monkeypatch):
    """Outputs placed on |out - ref| = atol + rtol * |ref| (computed in float64): a fused
    multiply-add would round that bound once, not twice, and move elements across it."""
    g = torch.Generator(device="cuda").manual_seed(3)
    for dtype in (torch.float64, torch.float32):
        ref = (torch.randn(300_001, generator=g, device="cuda", dtype=torch.float64)
               * 10.0 ** torch.randint(-6, 6, (300_001,), generator=g, device="cuda"))
        ref = ref.to(dtype)
        for atol, rtol in ((1e-5, 1e-3), (1e-3, 1e-5), (0.1, 0.3)):
            r = ref.double()
            out = (r + torch.where(torch.rand_like(r) < 0.5, -1.0, 1.0)
                   * (r.abs() * rtol + atol)).to(dtype)
            got, want = _both(lambda: compare_tensor(out, ref, atol, rtol).as_dict(),
                              monkeypatch)
            _same(got, want, SUMS)


@on_gpu
def test_float64_overflow(monkeypatch):
    """float64 outputs near 1e308: differences overflow to Inf, and the truth check meets
    Inf / Inf (NaN, which wins the maximum as in torch)."""
    g = torch.Generator(device="cuda").manual_seed(4)
    ref = torch.randn(10_000, generator=g, device="cuda", dtype=torch.float64) * 1e307
    ref[:100] = 1.7e308
    out = ref.clone()
    out[:100] = -1.7e308
    _check_all(out, ref, ref.clone(), 1e-4, 1e-4, monkeypatch)
    got, _ = _both(lambda: compare_truth(out, ref, ref.clone()), monkeypatch)
    assert math.isnan(got["ratio"])


@on_gpu
def test_switch_off_and_unloadable_dtypes_take_the_torch_code(monkeypatch):
    out = torch.arange(5000, device="cuda")
    assert not fused.enabled(out, out)  # integer outputs: exact, by the torch code
    assert compare_tensor(out, out + (out == 7), 0.0, 0.0).error.startswith("1/5000 values")
    o = torch.ones(5000, device="cuda")
    assert fused.enabled(o, o)
    monkeypatch.setenv(fused.ENV, "0")
    assert not fused.enabled(o, o)
    _refuse(monkeypatch)
    assert compare_tensor(o, o, 0.0, 0.0).ok
    assert compare_truth(o, o, o.double())["ok"]


def _refuse(monkeypatch):
    def refuse(*args):
        raise AssertionError("the fused kernels were asked")
    for name in ("kb_stats", "scales", "truth_check"):
        monkeypatch.setattr(fused, name, refuse)


def test_switch_reads_the_environment(monkeypatch):
    monkeypatch.delenv(fused.ENV, raising=False)
    assert fused.switched_on()
    for value, on in (("0", False), (" 0 ", False), ("1", True), ("", True)):
        monkeypatch.setenv(fused.ENV, value)
        assert fused.switched_on() is on


def test_cpu_tensors_take_the_torch_code(monkeypatch):
    monkeypatch.delenv(fused.ENV, raising=False)
    out, ref, t = _case(5, 10_000, torch.float32, device="cpu")
    assert not fused.enabled(ref, out, t)
    _refuse(monkeypatch)
    d = compare_tensor(out, ref, 1e-4, 1e-4)
    assert d.count > 0 and not d.ok
    assert set(compare_truth(out, ref, t)) == {"ok", "error", "ratio", "norm_ratio"}
