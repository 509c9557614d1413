"""Time the judge's comparison of one label on a GPU: the fused Triton kernels
(kb_eval/eval/judge/fused.py) against the torch code (`KB_EVAL_FUSED_COMPARE=0`), for
KernelBench's rule (`compare_tensor`) and the float64 truth's (`compare_truth`, two
passes), on a 260M-element fp32 output and a 64M-element bf16 one. Prints ms per label
and GB/s (the bytes of out, ref and truth each rule reads, over its time; the same count
for both paths) and checks that the two paths agree.

    python benchmarks/compare_speed.py [--reps 3] [--host-out]

`--host-out` puts the candidate's outputs in pinned host memory, as the reference server
reads them from a file (then the copy to the GPU is part of both times).
"""

from __future__ import annotations

import argparse
import math
import os

import torch

from kb_eval.eval.judge import fused
from kb_eval.eval.judge.correctness import compare_tensor
from kb_eval.eval.judge.truth import compare_truth

CASES = ((torch.float32, 260_000_000), (torch.bfloat16, 64 * 1024 * 1024))
SUMS = {"sum_abs", "ratio", "norm_ratio"}


def data(dtype: torch.dtype, n: int, host_out: bool):
    g = torch.Generator(device="cuda").manual_seed(0)
    truth = torch.randn(n, generator=g, device="cuda", dtype=torch.float64)
    ref = truth.to(dtype)
    out = (ref + 1e-3 * torch.randn(n, generator=g, device="cuda", dtype=dtype)).to(dtype)
    return (out.cpu().pin_memory() if host_out else out), ref, truth


def timed(fn, switch: str, reps: int):
    """(ms per call, last result) with the fused path on ("1") or off ("0")."""
    os.environ[fused.ENV] = switch
    result = fn()  # warm-up: Triton compiles on the first call
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        result = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps, result


def agree(a: dict, b: dict) -> bool:
    def same(k, x, y):
        if isinstance(x, float) and math.isnan(x):
            return isinstance(y, float) and math.isnan(y)
        return math.isclose(x, y, rel_tol=1e-12) if k in SUMS else x == y
    return a.keys() == b.keys() and all(same(k, a[k], b[k]) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--host-out", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available() or fused.triton is None:
        raise SystemExit("needs a CUDA GPU and Triton")
    print(torch.cuda.get_device_name(), "| out in", "pinned host memory" if args.host_out
          else "GPU memory")
    ok = True
    for dtype, n in CASES:
        out, ref, truth = data(dtype, n, args.host_out)
        size = out.element_size() * n
        rules = (("kernelbench", lambda: compare_tensor(out, ref, 1e-2, 1e-2).as_dict(),
                  2 * size),
                 ("f64 truth", lambda: compare_truth(out, ref, truth), 2 * size + 16 * n + size))
        for name, fn, nbytes in rules:
            t_ms, t_res = timed(fn, "0", args.reps)
            f_ms, f_res = timed(fn, "1", args.reps)
            same = agree(f_res, t_res)
            ok &= same
            print(f"{str(dtype)[6:]:>8} {n / 1e6:5.0f}M {name:12} torch {t_ms:8.1f} ms "
                  f"{nbytes / t_ms / 1e6:7.0f} GB/s | fused {f_ms:7.2f} ms "
                  f"{nbytes / f_ms / 1e6:7.0f} GB/s | x{t_ms / f_ms:5.1f} "
                  f"{'agree' if same else 'DIFFER'}")
            if not same:
                print("   torch:", t_res, "\n   fused:", f_res)
        del out, ref, truth
        torch.cuda.empty_cache()
    os.environ.pop(fused.ENV, None)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
