"""Do two runs of the same candidates agree? (issue 15: the overlap must not change
verdicts or timings.) Reads two `benchmarks/eval_throughput.py --records` files.

    python benchmarks/compare_records.py serial.json overlap.json [--pass warm]

Per sample (key, sample): the same status in both, and each run's speedup inside the
other's 95 % interval. Prints the disagreements and one summary line; exit 1 if any.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def samples(path: Path, name: str) -> dict:
    rows = json.loads(path.read_text())["passes"].get(name)
    if rows is None:
        sys.exit(f"compare_records: {path} has no '{name}' pass")
    return {(r["key"], r["sample"]): r for r in rows}


def inside(x: float | None, ci: list | None) -> bool | None:
    if x is None or not ci:
        return None
    return ci[0] <= x <= ci[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="a --records file (e.g. lane depth 1)")
    p.add_argument("b", type=Path, help="another, of the same candidates")
    p.add_argument("--pass", dest="pass_name", default="warm", help="cold or warm (default)")
    args = p.parse_args()
    a, b = samples(args.a, args.pass_name), samples(args.b, args.pass_name)
    common = sorted(a.keys() & b.keys())
    status_diff, outside, checked = [], [], 0
    for k in common:
        ra, rb = a[k], b[k]
        if ra["status"] != rb["status"]:
            status_diff.append(f"{k}: {ra['status']} vs {rb['status']}")
            continue
        agree = [inside(ra["speedup"], rb["speedup_ci"]), inside(rb["speedup"], ra["speedup_ci"])]
        if None in agree:
            continue
        checked += 1
        if not all(agree):
            outside.append(f"{k}: {ra['speedup']:.3f} {ra['speedup_ci']} vs "
                           f"{rb['speedup']:.3f} {rb['speedup_ci']}")
    for line in status_diff + outside:
        print("  " + line)
    print(f"{len(common)} samples in both ({len(a)} / {len(b)}); verdicts differ on "
          f"{len(status_diff)}; speedups checked {checked}, outside the other's interval "
          f"{len(outside)}")
    return 1 if status_diff or outside else 0


if __name__ == "__main__":
    sys.exit(main())
