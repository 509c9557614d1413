"""Does a host-paced reference launch at one pace in every process? On the H100 (7a07add)
KernelBench level1/71 (~1,900 launches per call) timed 14.5 ms in one baseline pass and
10.9 ms in the next, each pass's process steady within itself (14.1-15.0 and 10.1-11.5 ms
call to call). Times the problem in fresh processes, one after another on one core,
alternately with address-space randomisation on and off (personality ADDR_NO_RANDOMIZE,
as `setarch -R`): when the memory layout sets the pace, the processes without
randomisation agree with each other and those with it do not. Needs CUDA:

    python benchmarks/launch_pace.py KERNELBENCH_DIR 1/71 --processes 6 --core 15
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ADDR_NO_RANDOMIZE = 0x0040000


def _no_aslr_then_exec() -> None:
    """Re-run this process with randomisation off, once (the flag survives exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if not current & ADDR_NO_RANDOMIZE:
        libc.personality(current | ADDR_NO_RANDOMIZE)
        os.execv(sys.executable, [sys.executable, *sys.argv])


def child(folder: str, problem: str, calls: int) -> None:
    import torch

    from kb_eval.harness import load_problem, reference_model, time_model_samples
    from kb_eval.timing import TimingSettings

    dev = torch.device("cuda")
    level, number = problem.split("/")
    path = next((Path(folder) / f"level{level}").glob(f"{number}_*.py"))
    module, init = load_problem(path.read_text(), "fp32", dev)
    model = reference_model(module, init, "fp32", dev)
    samples, launch = time_model_samples(model, module, 5, "fp32", dev,
                                         TimingSettings(warmup=3, trials=calls))
    print(json.dumps({"median": statistics.median(samples), "launch_ms": launch,
                      "heap": hex(id(model))}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="KernelBench problems (level1/, level2/, ...)")
    p.add_argument("problem", help="LEVEL/NUMBER, e.g. 1/71")
    p.add_argument("--processes", type=int, default=6, help="per mode (default: 6)")
    p.add_argument("--calls", type=int, default=30, help="timed calls per process (30)")
    p.add_argument("--core", type=int, default=None, help="pin every process to this core")
    p.add_argument("--child", choices=["aslr", "fixed"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.child == "fixed":
            _no_aslr_then_exec()
        child(args.folder, args.problem, args.calls)
        return 0
    pin = [] if args.core is None else ["taskset", "-c", str(args.core)]
    got: dict[str, list[float]] = {"aslr": [], "fixed": []}
    for i in range(2 * args.processes):
        mode = "aslr" if i % 2 == 0 else "fixed"
        out = subprocess.run(pin + [sys.executable, __file__, args.folder, args.problem,
                                    "--calls", str(args.calls), "--child", mode],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{mode} process failed:\n{out.stderr[-2000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        got[mode].append(row["median"])
        print(f"{mode:5s} median {row['median']:.3f} ms, launch {row['launch_ms']} ms, "
              f"model at {row['heap']}", flush=True)
    for mode, xs in got.items():
        print(f"{mode}: {len(xs)} processes, medians {min(xs):.3f}-{max(xs):.3f} ms, "
              f"spread {100 * (max(xs) - min(xs)) / min(xs):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
