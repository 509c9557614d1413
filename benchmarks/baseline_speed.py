"""Baseline stage speed and repeatability, as a user runs it.

Runs `python -m kb_eval.baseline` twice back to back on one suite (5 warmup + 100 trials by
default) and prints: wall time of each pass and per problem (median of the children's
wall times, and pass wall / problems), and how well the two passes agree
(|mean1 - mean2| / mean1 per problem: p50, p90, max).

    python benchmarks/baseline_speed.py --source ops [--precision fp32] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_pass(source: str, precision: str, output: Path, extra: list[str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "kb_eval.baseline", "--source", source, "--precision",
           precision, "--trials", "100", "--output", str(output), "--force",
           "--quiet", *extra]
    subprocess.run(cmd, check=True)
    return time.monotonic() - t0, json.loads(output.read_text())


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default="ops")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--out", default="/tmp/kb_baseline_speed")
    args, extra = p.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    walls, files = [], []
    for i in (1, 2):
        wall, data = one_pass(args.source, args.precision, out / f"pass{i}.json", extra)
        walls.append(wall)
        files.append(data)
    r1, r2 = files[0]["records"], files[1]["records"]
    ok = [k for k in r1 if r1[k]["status"] == "ok" and r2.get(k, {}).get("status") == "ok"]
    n = len(r1)
    print(f"hardware: {files[0]['hardware']['name']}  source: {args.source}  "
          f"precision: {args.precision}  problems: {n} ({len(ok)} ok in both passes)")
    for i, (wall, data) in enumerate(zip(walls, files), 1):
        per = [r["wall_s"] for r in data["records"].values()]
        print(f"pass {i}: {wall:.1f} s total, {wall / n:.2f} s per problem; "
              f"child wall median {statistics.median(per):.2f} s, max {max(per):.2f} s")
    rel = {k: abs(r1[k]["timing"]["mean"] - r2[k]["timing"]["mean"]) / r1[k]["timing"]["mean"]
           for k in ok}
    vals = list(rel.values())
    print(f"|dmean|/mean between passes: p50 {100 * quantile(vals, .5):.2f} %  "
          f"p90 {100 * quantile(vals, .9):.2f} %  max {100 * max(vals):.2f} % "
          f"({max(rel, key=rel.get)})")
    print(f"{'problem':40s} {'median ms':>10s} {'mean1':>9s} {'mean2':>9s} {'d%':>6s}")
    for k in ok:
        print(f"{k:40s} {r1[k]['timing']['median']:10.4f} {r1[k]['timing']['mean']:9.4f} "
              f"{r2[k]['timing']['mean']:9.4f} {100 * rel[k]:6.2f}")


if __name__ == "__main__":
    main()
