"""Do two processes time the same launch-bound model alike? Two fresh processes load one
problem and time it in alternating rounds (as a paired timing does); per pair, the median
of the round ratios. Repeated over fresh pairs, the spread of those ratios is what a copy
of the reference can come out at. Needs CUDA:

    python benchmarks/launch_pairs.py KERNELBENCH_DIR 3/7 --pairs 6 --cores free
    python benchmarks/launch_pairs.py KERNELBENCH_DIR 3/7 --pairs 6 --cores same

--cores: free (the scheduler's choice), same (both on one core, as the pairing pins them,
kb_eval/eval/schedule/pinning.py) or apart (two different fixed cores).
On the H100 machine (16 cores): GoogleNet (3/7), free 0.962-1.153, same 0.973-1.005.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROUNDS, DROPPED, CALLS = 12, 2, 5


def side(folder: str, problem: str, device: str) -> None:
    """One process: load the problem, then time a round per line read from stdin."""
    import torch

    from kb_eval.harness import inputs_for, load_problem, reference_model
    from kb_eval.timing import take_launch_ms, time_calls, timer_for

    dev = torch.device(device)
    level, number = problem.split("/")
    path = next((Path(folder) / f"level{level}").glob(f"{number}_*.py"))
    module, init = load_problem(path.read_text(), "fp32", dev)
    model = reference_model(module, init, "fp32", dev)

    def args(i):
        return inputs_for(module, 5, ("timing", i), "fp32", dev)

    with torch.no_grad():
        for _ in range(3):
            model(*args(-1))
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        print("ready", flush=True)
        for _ in sys.stdin:
            model(*args(-1))
            sync()
            timer = timer_for(dev, True)
            take_launch_ms(timer)
            ms = time_calls(model, range(CALLS), timer, args, collect=False)
            print(json.dumps({"ms": statistics.median(ms), "launch": take_launch_ms(timer)}),
                  flush=True)


def one_pair(folder: str, problem: str, device: str, cores: tuple) -> tuple[float, list]:
    procs = []
    for core in cores:
        pin = [] if core is None else ["taskset", "-c", str(core)]
        procs.append(subprocess.Popen(pin + [sys.executable, __file__, "--side", folder, problem,
                                             device],
                                      text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            sys.exit(f"a side failed to load {problem} (its error is above; out of memory kills it silently)")
    rows = [[], []]
    for _ in range(ROUNDS):
        for k, p in enumerate(procs):
            p.stdin.write("go\n")
            p.stdin.flush()
            rows[k].append(json.loads(p.stdout.readline()))
    for p in procs:
        p.stdin.close()
        p.wait()
    a, b = rows[0][DROPPED:], rows[1][DROPPED:]
    return statistics.median(x["ms"] / y["ms"] for x, y in zip(a, b)), [a, b]


def main() -> None:
    if sys.argv[1:2] == ["--side"]:
        return side(*sys.argv[2:5])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernelbench", help="a KernelBench folder (level1/, level2/, level3/)")
    ap.add_argument("problem", help="LEVEL/NUMBER, e.g. 3/7")
    ap.add_argument("--pairs", type=int, default=6, help="fresh pairs of processes")
    ap.add_argument("--cores", choices=["free", "same", "apart"], default="free",
                    help="where the two processes run (see above)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to try the script")
    args = ap.parse_args()
    last = sorted(os.sched_getaffinity(0))[-1]
    cores = {"free": (None, None), "same": (last, last), "apart": (last, last - 1)}[args.cores]
    ratios = []
    for n in range(args.pairs):
        ratio, (a, b) = one_pair(args.kernelbench, args.problem, args.device, cores)
        ratios.append(ratio)
        ms = [statistics.median(x["ms"] for x in rows) for rows in (a, b)]
        launch = [statistics.median(x["launch"] or 0.0 for x in rows) for rows in (a, b)]
        print(f"pair {n}: A {ms[0]:.3f} ms (launch {launch[0]:.3f})  "
              f"B {ms[1]:.3f} ms (launch {launch[1]:.3f})  A/B {ratio:.3f}", flush=True)
    print(f"{args.problem} {args.cores}: A/B {min(ratios):.3f}-{max(ratios):.3f} over "
          f"{len(ratios)} pairs, median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
