"""How long a tensor fingerprint takes on this device (kb_eval/eval/child/probes.py), and
what one read of the data would cost: a device copy of the same bytes, and an int8 GEMM of
the bytes against a few weight columns (torch._int_mm, one read of the data on a GPU).

    python benchmarks/fingerprint_speed.py            # 1 and 6 GiB of fp32, on the GPU

Prints medians of 5 runs in ms. A KernelBench level-1 elementwise problem (6.4 GB inputs
and outputs) takes ~40 fingerprints of that size per sample, between its child and the
reference server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb_eval.eval.child.probes import fingerprint  # noqa: E402


def median_ms(fn, device: torch.device, runs: int = 5) -> float:
    fn()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def gemm_sums(x: torch.Tensor, weights: torch.Tensor, rows: int) -> torch.Tensor:
    """The bytes of `x` as int8 rows of weights.shape[0], times the weights (int32, exact),
    in chunks of `rows` rows: what a one-read fingerprint would compute first."""
    k = weights.shape[0]
    data = x.reshape(-1).view(torch.int8)
    n = data.numel() // k * k
    acc = torch.zeros(weights.shape[1], dtype=torch.int64, device=x.device)
    for s in range(0, n, rows * k):
        chunk = data[s:min(n, s + rows * k)].view(-1, k)
        acc += torch._int_mm(chunk, weights).sum(0, dtype=torch.int64)
    return acc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=int, nargs="+", default=[1, 6], help="sizes to time (GiB)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fingerprint_speed: needs a CUDA GPU")
    device = torch.device("cuda")
    for gib in args.gib:
        x = torch.randn(gib * (1 << 28), device=device)
        y = torch.empty_like(x)
        line = [f"{gib} GiB fp32: fingerprint {median_ms(lambda: fingerprint(x), device):.2f}",
                f"copy {median_ms(lambda: y.copy_(x), device):.2f}"]
        for n in (8, 32):
            w = torch.randint(-128, 128, (4096, n), dtype=torch.int8, device=device)
            for wt in (w, w.t().contiguous().t()):
                try:
                    ms = median_ms(lambda: gemm_sums(x, wt, 16384), device)
                    line.append(f"int8 gemm n={n} {'col' if wt.stride(0) == 1 else 'row'} {ms:.2f}")
                except RuntimeError as e:
                    line.append(f"int8 gemm n={n}: {str(e).splitlines()[0][:80]}")
        print(", ".join(line) + " (ms, median of 5)")
        del x, y


if __name__ == "__main__":
    main()
