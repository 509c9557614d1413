"""Does a host-paced reference launch at one pace in every process? On the H100 (7a07add)
KernelBench level1/71 (~1,900 launches per call) timed 14.5 ms in one baseline pass and
10.9 ms in the next, each pass's process steady within itself (14.1-15.0 and 10.1-11.5 ms
call to call). Times the problem in fresh processes, one after another on one core,
alternately with address-space randomisation on and off (personality ADDR_NO_RANDOMIZE,
as `setarch -R`): when the memory layout sets the pace, the processes without
randomisation agree with each other and those with it do not. Mode `nothp` turns
transparent huge pages off for the process (prctl PR_SET_THP_DISABLE, kept across exec),
`hugemalloc` asks glibc's malloc for them (GLIBC_TUNABLES glibc.malloc.hugetlb=1): when
whether a process happened to get huge pages sets its pace, those two agree within
themselves. Each line gives the process's huge-page memory (AnonHugePages). `--trace S`
instead watches one process for S seconds, taking in turn a fixed piece of pure host work
(kb_eval/host_state.py), 2,000 launches of a one-float kernel and one call of the problem: when
the host's own speed moves, all three move together; when only the launches move, the way
to the GPU does. Needs CUDA:

    python benchmarks/launch_pace.py KERNELBENCH_DIR 1/71 --processes 6 --core 15
    python benchmarks/launch_pace.py KERNELBENCH_DIR 1/71 --modes aslr nothp hugemalloc
    python benchmarks/launch_pace.py KERNELBENCH_DIR 1/71 --trace 60 --core 15
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
PR_SET_THP_DISABLE = 41
MODES = ("aslr", "fixed", "nothp", "hugemalloc")


def _no_aslr_then_exec() -> None:
    """Re-run this process with randomisation off, once (the flag survives exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if not current & ADDR_NO_RANDOMIZE:
        libc.personality(current | ADDR_NO_RANDOMIZE)
        os.execv(sys.executable, [sys.executable, *sys.argv])


def _huge_pages_kib() -> int:
    """This process's anonymous memory in transparent huge pages."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return -1


def _thp_setting() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def _spawn(mode: str, argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if mode == "hugemalloc":
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"

    def before_exec() -> None:
        if mode == "nothp":
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)

    return subprocess.run(argv, capture_output=True, text=True, env=env,
                          preexec_fn=before_exec)


def _reference(folder: str, problem: str):
    """The problem's module, its fp32 reference on the GPU, and the device."""
    import torch

    from kb_eval.harness import load_problem, reference_model

    dev = torch.device("cuda")
    level, number = problem.split("/")
    path = next((Path(folder) / f"level{level}").glob(f"{number}_*.py"))
    module, init = load_problem(path.read_text(), "fp32", dev)
    return module, reference_model(module, init, "fp32", dev), dev


def child(folder: str, problem: str, calls: int) -> None:
    from kb_eval.harness import time_model_samples
    from kb_eval.timing import TimingSettings

    module, model, dev = _reference(folder, problem)
    samples, launch = time_model_samples(model, module, 5, "fp32", dev,
                                         TimingSettings(warmup=3, trials=calls))
    print(json.dumps({"median": statistics.median(samples), "launch_ms": launch,
                      "heap": hex(id(model)), "huge_kib": _huge_pages_kib()}), flush=True)


def trace(folder: str, problem: str, seconds: float) -> None:
    import time

    import numpy as np
    import torch

    from kb_eval.harness import inputs_for
    from kb_eval.host_state import launch_pace_ms, work_ms

    module, model, dev = _reference(folder, problem)
    inputs = inputs_for(module, 5, "trace", "fp32", dev)

    def launches() -> float:
        return launch_pace_ms(dev, 2000, repeats=1)

    def call() -> tuple[float, float]:
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        launched = 1e3 * (time.perf_counter() - t)
        torch.cuda.synchronize()
        return launched, 1e3 * (time.perf_counter() - t)

    for _ in range(3):
        work_ms(1), launches(), call()
    rows, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        rows.append((time.perf_counter() - start, work_ms(1), launches(), *call()))
    cols = np.array(rows)
    for chunk in np.array_split(cols, min(len(cols), 30)):
        m = np.median(chunk, axis=0)
        print(f"t {m[0]:6.1f} s  host work {m[1]:7.3f} ms  2000 launches {m[2]:7.3f} ms  "
              f"call launched {m[3]:7.3f} ms, done {m[4]:7.3f} ms", flush=True)
    names = ["host work", "2000 launches", "call launched", "call done"]
    for i, name in enumerate(names, start=1):
        x = cols[:, i]
        print(f"{name:14s} p5 {np.percentile(x, 5):7.3f}  median {np.median(x):7.3f}  "
              f"p95 {np.percentile(x, 95):7.3f} ms  (p95/p5 {np.percentile(x, 95) / np.percentile(x, 5):.2f})")
    r = np.corrcoef(cols[:, 1:].T)
    print("correlation with the call's launch time: "
          + ", ".join(f"{names[i]} {r[i, 2]:+.2f}" for i in (0, 1, 3)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="KernelBench problems (level1/, level2/, ...)")
    p.add_argument("problem", help="LEVEL/NUMBER, e.g. 1/71")
    p.add_argument("--processes", type=int, default=6, help="per mode (default: 6)")
    p.add_argument("--calls", type=int, default=30, help="timed calls per process (30)")
    p.add_argument("--core", type=int, default=None, help="pin every process to this core")
    p.add_argument("--modes", nargs="+", choices=MODES, default=["aslr", "fixed"],
                   help="process kinds, taken in turn (default: aslr fixed)")
    p.add_argument("--trace", type=float, metavar="S", default=None,
                   help="watch one process for S seconds instead (host work, launches, calls)")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.trace:
        if args.core is not None:
            os.sched_setaffinity(0, {args.core})
        trace(args.folder, args.problem, args.trace)
        return 0
    if args.child:
        if args.child == "fixed":
            _no_aslr_then_exec()
        child(args.folder, args.problem, args.calls)
        return 0
    pin = [] if args.core is None else ["taskset", "-c", str(args.core)]
    print(f"transparent huge pages: {_thp_setting()}", flush=True)
    got: dict[str, list[float]] = {mode: [] for mode in args.modes}
    for i in range(len(args.modes) * args.processes):
        mode = args.modes[i % len(args.modes)]
        out = _spawn(mode, pin + [sys.executable, __file__, args.folder, args.problem,
                                  "--calls", str(args.calls), "--child", mode])
        if out.returncode:
            sys.exit(f"{mode} process failed:\n{out.stderr[-2000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        got[mode].append(row["median"])
        print(f"{mode:10s} median {row['median']:.3f} ms, launch {row['launch_ms']} ms, "
              f"model at {row['heap']}, huge pages {row['huge_kib']} KiB", flush=True)
    for mode, xs in got.items():
        print(f"{mode}: {len(xs)} processes, medians {min(xs):.3f}-{max(xs):.3f} ms, "
              f"spread {100 * (max(xs) - min(xs)) / min(xs):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
