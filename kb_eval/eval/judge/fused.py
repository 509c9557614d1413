"""Fused Triton kernels for the judge's comparisons on a GPU (correctness.py, truth.py):
each input read once instead of ~20 torch kernels per chunk.

Every expression is the torch code's in float64 with contraction off (an FMA would move an
element across its bound): counts and maxima equal bit for bit, sums differ only by order.
`KB_EVAL_FUSED_COMPARE=0` turns it off; errors inside are raised, never a silent fallback.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (a CPU-only install): the torch code judges
    triton = tl = None

ENV = "KB_EVAL_FUSED_COMPARE"
LOADABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Few elements per thread do best: the float64 division keeps many registers live.
BLOCK = 256  # elements per step of a program: 2 per thread at 4 warps
TILES = 32  # steps per program, their maxima, sums and counts kept per lane in registers
WARPS = 4


def switched_on() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


def enabled(ref: torch.Tensor, *others: torch.Tensor) -> bool:
    """Whether the fused kernels judge these flat tensors (`ref` decides the device)."""
    return (switched_on() and ref.device.type == "cuda" and triton is not None
            and all(t.dtype in LOADABLE for t in (ref, *others)))


def kb_stats(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float,
             chunk: int, ku: float = 0.0) -> tuple:
    """correctness.kb_stats_torch's result (KbStats's fields in order) for flat `o`, `r`."""
    params = _params(r.device, atol, rtol, max(atol, 1e-12), ku)
    max_abs, max_rel, excess, sum_abs, count, bad, nan_bad, inf_bad, d2, r2 = _run(
        _kb_kernel, r.device, [o, r], params, n_max=3, n_sum=7, chunk=chunk)
    return (max_abs, sum_abs, int(count), max_rel, int(bad), int(nan_bad), int(inf_bad),
            excess, d2, r2)


def scales(r: torch.Tensor, t: torch.Tensor, chunk: int) -> tuple[float, float, int]:
    """truth._scales_torch's result."""
    e2, t2, n = _run(_scales_kernel, r.device, [r, t], None, n_max=0, n_sum=3, chunk=chunk)
    return e2, t2, int(n)


def truth_check(o: torch.Tensor, r: torch.Tensor, t: torch.Tensor, s: float, m: float,
                u: float, k: float, chunk: int) -> tuple[float, float, int, int, int]:
    """truth._check_torch's result: (worst, c2, bad, nan_bad, inf_bad)."""
    params = _params(r.device, s, m, u, k, torch.finfo(torch.float64).tiny)
    worst, c2, bad, nan_bad, inf_bad = _run(
        _truth_kernel, r.device, [o, r, t], params, n_max=1, n_sum=4, chunk=chunk)
    return worst, c2, int(bad), int(nan_bad), int(inf_bad)


def _params(device: torch.device, *values: float) -> torch.Tensor:
    """float64 scalars in a device tensor (Triton passes a Python float as fp32); `fill_`
    makes no copy that waits for the device."""
    p = torch.empty(len(values), dtype=torch.float64, device=device)
    for i, v in enumerate(values):
        p[i].fill_(float(v))
    return p


def _run(kernel, device: torch.device, xs: list[torch.Tensor], params: torch.Tensor | None,
         n_max: int, n_sum: int, chunk: int) -> list[float]:
    """Launch `kernel` over the flat tensors `xs`, then reduce its per-program partials: the
    first n_max rows by max (NaN wins), the n_sum others by sum; one host read. A tensor on
    another device is copied `chunk` elements at a time."""
    n = xs[0].numel()
    if n == 0:
        return [0.0] * (n_max + n_sum)
    span = BLOCK * TILES  # elements per program, per partial result
    assert chunk % span == 0 and all(x.numel() == n for x in xs)
    part = torch.empty((n_max + n_sum, triton.cdiv(n, span)), dtype=torch.float64,
                       device=device)
    extra = () if params is None else (params,)
    with torch.cuda.device(device):
        if all(x.device == device for x in xs):
            _launch(kernel, [x.contiguous() for x in xs], extra, part, n)
        else:
            here = [x.contiguous() if x.device == device else x for x in xs]
            for s in range(0, n, chunk):
                # the copies are stream-ordered before the kernel that reads them
                pieces = [x[s:s + chunk] if x.device == device
                          else x[s:s + chunk].to(device, non_blocking=True).contiguous()
                          for x in here]
                _launch(kernel, pieces, extra, part[:, s // span:], pieces[0].numel())
        result = torch.cat([part[:n_max].amax(dim=1), part[n_max:].sum(dim=1)])
    return result.tolist()


def _launch(kernel, xs: list[torch.Tensor], extra: tuple, part: torch.Tensor, n: int) -> None:
    grid = (triton.cdiv(n, BLOCK * TILES),)
    kernel[grid](*xs, *extra, part, n, part.stride(0), BLOCK=BLOCK, TILES=TILES,
                 num_warps=WARPS, enable_fp_fusion=False)


if triton is not None:
    @triton.jit
    def _finite(x):
        return tl.abs(x) < float("inf")  # false for NaN and for +-Inf

    @triton.jit
    def _max_nan(a, b):
        # NaN wins, as in torch.max (tl.maximum would drop it)
        return tl.where(a != a, a, tl.where(b != b, b, tl.maximum(a, b)))

    @triton.jit
    def _special(o, r, inb):
        # NaN, and an infinity, that differ between out and ref (truth.special_mismatches:
        # where both are finite neither can, so every position is looked at)
        o_num, r_num = o == o, r == r
        inf = ((tl.abs(o) == float("inf")) | (tl.abs(r) == float("inf"))) & o_num & r_num
        return ((o_num ^ r_num) & inb).to(tl.int32), (inf & (o != r) & inb).to(tl.int32)

    @triton.jit
    def _step(pid, i, n, BLOCK: tl.constexpr, TILES: tl.constexpr):
        # int64 offsets: n may pass 2^31
        offs = (pid.to(tl.int64) * TILES + i) * BLOCK + tl.arange(0, BLOCK)
        return offs, offs < n

    @triton.jit
    def _load(ptr, offs, inb):
        # in the tensor's own dtype: the NaN/Inf tests are exact there, and cheaper
        return tl.load(ptr + offs, mask=inb, other=0.0)

    @triton.jit
    def _put(out, stride, row, value):
        tl.store(out + row * stride, value)

    @triton.jit
    def _put_count(out, stride, row, lanes):
        tl.store(out + row * stride, tl.sum(lanes, axis=0).to(tl.float64))

    @triton.jit
    def _kb_kernel(o_ptr, r_ptr, p_ptr, part_ptr, n, stride, BLOCK: tl.constexpr,
                   TILES: tl.constexpr):
        pid = tl.program_id(0)
        atol, rtol, floor = tl.load(p_ptr), tl.load(p_ptr + 1), tl.load(p_ptr + 2)
        ku = tl.load(p_ptr + 3)
        max_abs = tl.zeros([BLOCK], dtype=tl.float64)
        max_rel = tl.zeros([BLOCK], dtype=tl.float64)
        excess = tl.zeros([BLOCK], dtype=tl.float64)
        sum_abs = tl.zeros([BLOCK], dtype=tl.float64)
        d2 = tl.zeros([BLOCK], dtype=tl.float64)
        r2 = tl.zeros([BLOCK], dtype=tl.float64)
        count = tl.zeros([BLOCK], dtype=tl.int32)
        bad = tl.zeros([BLOCK], dtype=tl.int32)
        nan_bad = tl.zeros([BLOCK], dtype=tl.int32)
        inf_bad = tl.zeros([BLOCK], dtype=tl.int32)
        for i in range(TILES):
            offs, inb = _step(pid, i, n, BLOCK, TILES)
            o, r = _load(o_ptr, offs, inb), _load(r_ptr, offs, inb)
            fin = _finite(o) & _finite(r) & inb
            nb, ib = _special(o, r, inb)
            o, r = o.to(tl.float64), r.to(tl.float64)
            diff = tl.where(fin, tl.abs(o - r), 0.0)
            ra = tl.where(fin, tl.abs(r), 0.0)
            rel = tl.where(fin, diff / tl.maximum(ra, floor), 0.0)
            # no NaN here (|o - r| of finite values, over a floor > 0): a plain maximum
            max_abs, max_rel = tl.maximum(max_abs, diff), tl.maximum(max_rel, rel)
            excess = tl.maximum(excess, diff - ra * ku)
            sum_abs += diff
            d2 += diff * diff
            r2 += ra * ra
            count += fin.to(tl.int32)
            bad += ((diff > ra * rtol + atol) & inb).to(tl.int32)
            nan_bad += nb
            inf_bad += ib
        out = part_ptr + pid
        _put(out, stride, 0, tl.max(max_abs, axis=0))
        _put(out, stride, 1, tl.max(max_rel, axis=0))
        _put(out, stride, 2, tl.max(excess, axis=0))
        _put(out, stride, 3, tl.sum(sum_abs, axis=0))
        _put_count(out, stride, 4, count)
        _put_count(out, stride, 5, bad)
        _put_count(out, stride, 6, nan_bad)
        _put_count(out, stride, 7, inf_bad)
        _put(out, stride, 8, tl.sum(d2, axis=0))
        _put(out, stride, 9, tl.sum(r2, axis=0))

    @triton.jit
    def _scales_kernel(r_ptr, t_ptr, part_ptr, n, stride, BLOCK: tl.constexpr,
                       TILES: tl.constexpr):
        pid = tl.program_id(0)
        e2 = tl.zeros([BLOCK], dtype=tl.float64)
        t2 = tl.zeros([BLOCK], dtype=tl.float64)
        count = tl.zeros([BLOCK], dtype=tl.int32)
        for i in range(TILES):
            offs, inb = _step(pid, i, n, BLOCK, TILES)
            r, t = _load(r_ptr, offs, inb), _load(t_ptr, offs, inb)
            fin = _finite(r) & _finite(t) & inb
            r, t = r.to(tl.float64), t.to(tl.float64)
            e = tl.where(fin, r - t, 0.0)
            tf = tl.where(fin, t, 0.0)
            e2 += e * e
            t2 += tf * tf
            count += (fin & ((r != 0.0) | (t != 0.0))).to(tl.int32)
        out = part_ptr + pid
        _put(out, stride, 0, tl.sum(e2, axis=0))
        _put(out, stride, 1, tl.sum(t2, axis=0))
        _put_count(out, stride, 2, count)

    @triton.jit
    def _truth_kernel(o_ptr, r_ptr, t_ptr, p_ptr, part_ptr, n, stride, BLOCK: tl.constexpr,
                      TILES: tl.constexpr):
        pid = tl.program_id(0)
        s, m, u = tl.load(p_ptr), tl.load(p_ptr + 1), tl.load(p_ptr + 2)
        k, tiny = tl.load(p_ptr + 3), tl.load(p_ptr + 4)
        worst = tl.zeros([BLOCK], dtype=tl.float64)
        c2 = tl.zeros([BLOCK], dtype=tl.float64)
        bad = tl.zeros([BLOCK], dtype=tl.int32)
        nan_bad = tl.zeros([BLOCK], dtype=tl.int32)
        inf_bad = tl.zeros([BLOCK], dtype=tl.int32)
        for i in range(TILES):
            offs, inb = _step(pid, i, n, BLOCK, TILES)
            o, r, t = _load(o_ptr, offs, inb), _load(r_ptr, offs, inb), _load(t_ptr, offs, inb)
            nb, ib = _special(o, r, inb)
            counted = _finite(o) & _finite(r) & _finite(t) & inb
            o, r, t = o.to(tl.float64), r.to(tl.float64), t.to(tl.float64)
            err = tl.where(counted, tl.abs(o - t), 0.0)
            # K * (|ref - truth| + S + u * (|truth| + M)), in the torch code's order
            bound = (tl.abs(r - t) + s + (tl.abs(t) + m) * u) * k
            share = tl.where(counted, err / tl.maximum(bound, tiny), 0.0)
            worst = _max_nan(worst, share)
            c2 += err * err
            bad += (share > 1).to(tl.int32)
            nan_bad += nb
            inf_bad += ib
        out = part_ptr + pid
        _put(out, stride, 0, tl.reduce(worst, 0, _max_nan))
        _put(out, stride, 1, tl.sum(c2, axis=0))
        _put_count(out, stride, 2, bad)
        _put_count(out, stride, 3, nan_bad)
        _put_count(out, stride, 4, inf_bad)
