"""How far honest reorderings and precision downgrades sit from float64 truth, in units of
the reference's own error: the measurements behind the float64 judge's k
(kb_eval/eval/judge/truth.py, docs/GUARANTEES.md).

For each case: the reference at fp32 (PyTorch), its float64 truth on the same inputs,
and variants. Printed per variant: `need` = the k the elementwise rule would need
(max_i |cand - truth| / (|ref - truth| + S + u|truth|), S = rms of the reference's error)
and `norm` = ||cand - truth|| / ||ref - truth||. Honest variants must stay well below k,
downgrades well above it.

    python benchmarks/f64_bound.py            # CPU, a few minutes on 2 cores
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

U32 = 2.0 ** -24


def ratios(cand: torch.Tensor, ref: torch.Tensor, truth: torch.Tensor) -> tuple[float, float]:
    c, r, t = cand.double(), ref.double(), truth
    e_ref = (r - t).abs()
    s = e_ref.pow(2).mean().sqrt()
    need = ((c - t).abs() / (e_ref + s + U32 * t.abs()).clamp_min(1e-300)).max()
    norm = (c - t).norm() / (r - t).norm().clamp_min(1e-300)
    return float(need), float(norm)


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """fp32 values rounded to `bits` mantissa bits (10: TF32), round to nearest even."""
    i = x.view(torch.int32)
    drop = 23 - bits
    half = 1 << (drop - 1)
    lsb = (i >> drop) & 1
    return ((i + half - 1 + lsb) & ~((1 << drop) - 1)).view(torch.float32)


def sequential_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Each output summed term by term over K, in fp32 (a naive kernel's inner loop)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1] * b[k:k + 1, :]
    return acc


def chunked_matmul(a: torch.Tensor, b: torch.Tensor, chunk: int) -> torch.Tensor:
    out = torch.zeros(a.shape[0], b.shape[1])
    for s in range(0, a.shape[1], chunk):
        out += a[:, s:s + chunk] @ b[s:s + chunk]
    return out


def matmul_cases(m: int, k: int, n: int, sequential: bool):
    a, b = torch.randn(m, k), torch.randn(k, n)
    ref, truth = a @ b, a.double() @ b.double()
    yield "chunked K=1024", chunked_matmul(a, b, 1024), ref, truth
    yield "chunked K=64", chunked_matmul(a, b, 64), ref, truth
    yield "transposed (b^T a^T)^T", (b.t() @ a.t()).t(), ref, truth
    if sequential:
        yield "sequential fp32", sequential_matmul(a, b), ref, truth
    yield "TF32 inputs", round_mantissa(a, 10) @ round_mantissa(b, 10), ref, truth
    yield "fp16 inputs, fp32 sum", a.half().float() @ b.half().float(), ref, truth
    yield "bf16 inputs, fp32 sum", a.bfloat16().float() @ b.bfloat16().float(), ref, truth
    yield "bf16 matmul", (a.bfloat16() @ b.bfloat16()).float(), ref, truth


def other_cases():
    x = torch.randn(64, 32768)
    ref, truth = torch.softmax(x, -1), torch.softmax(x.double(), -1)
    e = (x - x.max(-1, keepdim=True).values).exp()
    yield "softmax: exp/sum by hand", e / e.sum(-1, keepdim=True), ref, truth
    yield "softmax: bf16", torch.softmax(x.bfloat16(), -1).float(), ref, truth
    w, bias = torch.randn(32768), torch.randn(32768)
    ref = F.layer_norm(x, (32768,), w, bias)
    truth = F.layer_norm(x.double(), (32768,), w.double(), bias.double())
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    yield "layernorm: two-pass by hand", (x - mu) / (var + 1e-5).sqrt() * w + bias, ref, truth
    yield "layernorm: fp16", F.layer_norm(x.half(), (32768,), w.half(), bias.half()).float(), ref, truth
    img, kern = torch.randn(8, 64, 64, 64), torch.randn(128, 64, 3, 3)
    ref, truth = F.conv2d(img, kern, padding=1), F.conv2d(img.double(), kern.double(), padding=1)
    unf = F.unfold(img, 3, padding=1)  # im2col + GEMM: a different order
    im2col = (kern.view(128, -1) @ unf).view(8, 128, 64, 64)
    yield "conv2d: im2col GEMM", im2col, ref, truth
    yield "conv2d: TF32 inputs", F.conv2d(round_mantissa(img, 10), round_mantissa(kern, 10),
                                           padding=1), ref, truth
    s = torch.randn(256, 65536)
    ref, truth = s.sum(-1), s.double().sum(-1)
    yield "row sum: cumsum last", s.cumsum(-1)[:, -1], ref, truth
    yield "row sum: fp16 inputs", s.half().float().sum(-1), ref, truth
    g = torch.randn(1 << 22)
    ref, truth = F.gelu(g), F.gelu(g.double())
    yield "gelu: tanh approximation", F.gelu(g, approximate="tanh"), ref, truth
    yield "gelu: x*sigmoid(1.702x)", g * torch.sigmoid(1.702 * g), ref, truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    print(f"{'case':44s} {'need k':>10s} {'norm ratio':>11s}")
    groups = [("matmul 256x1024x256", matmul_cases(256, 1024, 256, True)),
              ("matmul 256x16384x256", matmul_cases(256, 16384, 256, True)),
              ("matmul 256x131072x256", matmul_cases(256, 131072, 256, False)),
              ("other ops", other_cases())]
    for title, cases in groups:
        print(f"-- {title}")
        for name, cand, ref, truth in cases:
            need, norm = ratios(cand, ref, truth)
            print(f"{name:44s} {need:10.3g} {norm:11.3g}", flush=True)


if __name__ == "__main__":
    main()
