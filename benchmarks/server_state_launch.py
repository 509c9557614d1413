"""Does a reference server's history slow a launch-bound model's launches? In one process
pinned to one core: model A of a KernelBench problem built first, model B of the same
problem built after eight other level-3 problems were loaded and run (what a reference
server holds by then; `drop`: and let go again); A and B timed in 30 alternating windows
of 20 calls (host time of a call, the launch-bound part); B/A per window. Needs CUDA:

    taskset -c 15 python benchmarks/server_state_launch.py KERNELBENCH_DIR 22 [drop]

On the H100 machine (2026-11-27): B/A medians 1.022 (EfficientNetB0, 3/22), 0.997 (3/20),
1.004 (3/24), 1.003 (3/22, drop), with windows from 0.56 to 1.69: where a model's objects
were made is not why level-3 copies time 4-9 % faster than the reference server's rounds
once the server has served other problems (with a fresh server they do not: 3/20, 3/22,
3/23 alone at 0.963-1.019); the host's launch speed itself swings that much from one
window of calls to the next.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

from kb_eval.harness import inputs_for, load_problem, reference_model

OTHERS = ("7", "9", "10", "15", "16", "21", "5", "13")  # level-3 problems a server held
WINDOWS, CALLS = 30, 20


def load(folder: Path, number: str, dev: torch.device):
    path = next(folder.glob(f"{number}_*.py"))
    module, init = load_problem(path.read_text(), "fp32", dev)
    return module, reference_model(module, init, "fp32", dev)


def host_ms(model, inputs: list) -> float:
    """Median host time of a call (launch-bound: its launches), each call synchronized."""
    times = []
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        for _ in range(CALLS):
            started = time.perf_counter()
            model(*inputs)
            times.append(time.perf_counter() - started)
            torch.cuda.synchronize()
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernelbench", type=Path, help="a KernelBench folder (with level3/)")
    ap.add_argument("problem", help="a level-3 problem number, e.g. 22")
    ap.add_argument("drop", nargs="?", choices=["drop"], help="let the other problems go "
                    "before model B is built")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    dev, folder = torch.device("cuda:0"), args.kernelbench / "level3"
    module, model_a = load(folder, args.problem, dev)
    inputs = inputs_for(module, 5, ("timing", 0), "fp32", dev)
    kept = []
    for number in OTHERS:
        other, model = load(folder, number, dev)
        with torch.no_grad():
            model(*inputs_for(other, 5, ("correct", 0), "fp32", dev))
        kept.append(model)
    if args.drop:
        kept.clear()
        gc.collect()
    _, model_b = load(folder, args.problem, dev)
    gc.disable()  # as in timed calls
    ratios = []
    for w in range(WINDOWS):  # alternating which goes first
        if w % 2 == 0:
            a = host_ms(model_a, inputs)
            b = host_ms(model_b, inputs)
        else:
            b = host_ms(model_b, inputs)
            a = host_ms(model_a, inputs)
        ratios.append(b / a)
    print(f"3/{args.problem} {'drop' if args.drop else 'keep'}: B/A median "
          f"{statistics.median(ratios):.3f}, windows {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
