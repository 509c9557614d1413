"""What the sandbox costs a child: the wall time of N trivial tasks, each in a fresh
child (spares and the zygote warm, as in a run), sandboxed and not, in turns.

    python benchmarks/sandbox_cost.py --n 40 [--cuda]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kb_eval.isolation import run_isolated, sandbox

TARGET = "kb_eval.isolation.sandbox_probe:inside"


def one(workdir: Path, env: dict, cuda: bool) -> float:
    t0 = time.perf_counter()
    out = run_isolated(TARGET, {"cuda": cuda}, workdir=workdir, timeout_s=120, env=env,
                       prewarm=True, warm_cuda=cuda)
    wall = time.perf_counter() - t0
    if not out.ok:
        raise SystemExit(f"task failed: {out.describe()}\n{out.output_tail[-2000:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="tasks per setting (default: 40)")
    p.add_argument("--cuda", action="store_true", help="children open a CUDA context")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kb_sandbox_cost_"))
    policy = sandbox.Policy(write=[str(root)])
    settings = {"plain": {"KB_EVAL_COST": "plain"}, "sandboxed": policy.to_env()}
    for name, env in settings.items():  # warm both zygotes and their spares
        for _ in range(3):
            one(root / f"warm_{name}", env, args.cuda)
    walls: dict[str, list[float]] = {name: [] for name in settings}
    for i in range(args.n):
        for name, env in settings.items():
            walls[name].append(one(root / f"{name}_{i}", env, args.cuda))
    for name, values in walls.items():
        print(f"{name:10s} median {statistics.median(values) * 1e3:8.1f} ms  "
              f"p90 {sorted(values)[int(0.9 * len(values))] * 1e3:8.1f} ms  (n={len(values)})")
    ratio = statistics.median(walls["sandboxed"]) / statistics.median(walls["plain"])
    print(f"sandboxed / plain: {ratio:.3f}")


if __name__ == "__main__":
    main()
