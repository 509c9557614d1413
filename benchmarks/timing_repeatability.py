"""Issue 14 items 3-4 figures, from files the evaluator wrote (nothing is timed here).

  copies CHECK.json     a `python -m kb_eval.check --harness --out CHECK.json` run (each
                        problem's reference as its own candidate, live paired baseline):
                        how many copies' speedups lie in [0.97, 1.03], how many intervals
                        hold 1.0, how many would count in fast_1_sig (lo > 1), by method.
  drift A.json B.json   two `python -m kb_eval.baseline --output` passes (more pairs
                        when a pass was timed in parts): |dmean|/mean and
                        |dmedian|/median per problem, p50 / p90 / max, how many moved
                        over 1 % and over 3 %, all and the GPU-bound ones (launch share
                        under 0.9), and the problems that moved most
                        with their launch share, each visit's median (`--visits`) and
                        what the GPU did in each pass (SM clock before/after, slowdowns)
                        and how fast the host ran (kb_eval/host_state.py, ms before/after).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from kb_eval.host_state import HOST_PACED


def copies(path: Path) -> dict:
    rows = [r for r in json.loads(path.read_text()).get("problems", []) if r.get("speedup")]
    cis = [r for r in rows if r.get("speedup_ci")]
    near = [r for r in rows if 0.97 <= r["speedup"] <= 1.03]
    holds = [r for r in cis if r["speedup_ci"][0] <= 1.0 <= r["speedup_ci"][1]]
    sig = [r for r in cis if r["speedup_ci"][0] > 1.0]
    return {"copies": len(rows), "in_0.97_1.03": len(near), "with_interval": len(cis),
            "interval_holds_1": len(holds), "fast_1_sig": len(sig),
            "fast_1_sig_keys": [r["key"] for r in sig],
            "outside_0.97_1.03": {r["key"]: round(r["speedup"], 4) for r in rows
                                  if r not in near},
            "methods": dict(Counter(r.get("speedup_ci_method") for r in rows))}


def _records(path: Path) -> dict:
    records = json.loads(path.read_text()).get("records", {})
    return {k: r for k, r in records.items() if r.get("timing")}


def _pass_detail(record: dict) -> dict:
    """One pass of a problem: median (and each visit's, when it had several: one state
    through all of them means the state outlasted a sweep), launch share, SM clock before
    -> after (its last visit's), slowdowns, the host's fixed work before -> after."""
    t, gpu = record["timing"], record.get("gpu") or {}
    before, after = gpu.get("before") or {}, gpu.get("after") or {}
    share = (t.get("launch_ms") or 0) / t["median"] if t["median"] else None
    visits = [round(statistics.median(v["samples_ms"]), 4)
              for v in record.get("visits") or [] if v.get("samples_ms")]
    hbm = [((v.get("gpu") or {}).get("before") or {}).get("mem_temp_c")
           for v in record.get("visits") or []]
    return {"median": round(t["median"], 4), "launch_share": share and round(share, 2),
            **({"visit_medians": visits, "visit_mem_temp_c": hbm} if len(visits) > 1 else {}),
            "sm_mhz": [before.get("sm_mhz"), after.get("sm_mhz")],
            "temp_c": [before.get("temp_c"), after.get("temp_c")],
            "mem_temp_c": [before.get("mem_temp_c"), after.get("mem_temp_c")],
            "slowdowns": sorted(set(before.get("slowdowns", []) + after.get("slowdowns", []))),
            "host_work_ms": record.get("host_work_ms"),
            "launch_pace_ms": [v.get("launch_pace_ms") for v in record.get("visits") or []],
            "host_tries": [v.get("host_tries") for v in record.get("visits") or []],
            "host_full_pace": [v.get("host_full_pace") for v in record.get("visits") or []]}


def _spread(sa: dict, sb: dict, keys: list[str], stat: str) -> dict:
    d = np.array([abs(sa[k][stat] - sb[k][stat]) / sa[k][stat] for k in keys]) * 100
    return {"p50_pct": round(float(np.percentile(d, 50)), 3),
            "p90_pct": round(float(np.percentile(d, 90)), 3),
            "max_pct": round(float(d.max()), 3), "worst": keys[int(d.argmax())],
            # the targets' terms: at most a tenth over 1 %, none over 3 %
            "over_1_pct": int((d > 1).sum()), "over_3_pct": int((d > 3).sum())}


def drift(a: list[Path], b: list[Path], worst: int = 10) -> dict:
    """Pass A (its files' records together) against pass B: over all problems in both,
    and over the GPU-bound ones (launch share under host_state.HOST_PACED in pass A)."""
    ra = {k: r for path in a for k, r in _records(path).items()}
    rb = {k: r for path in b for k, r in _records(path).items()}
    sa, sb = ({k: r["timing"] for k, r in x.items()} for x in (ra, rb))
    keys = sorted(set(sa) & set(sb))
    out: dict = {"problems": len(keys)}
    gpu_bound = [k for k in keys if (sa[k].get("launch_ms") or 0) < HOST_PACED
                 * sa[k]["median"]]
    for stat in ("mean", "median"):
        if keys:
            out[stat] = _spread(sa, sb, keys, stat)
        if gpu_bound:
            out[f"gpu_bound_{stat}"] = {"problems": len(gpu_bound),
                                        **_spread(sa, sb, gpu_bound, stat)}
    moved = sorted(keys, key=lambda k: -abs(sa[k]["median"] - sb[k]["median"]) / sa[k]["median"])
    out["moved_most"] = {k: {"median_shift_pct": round(100 * abs(sa[k]["median"] - sb[k]["median"])
                                                       / sa[k]["median"], 2),
                             "a": _pass_detail(ra[k]), "b": _pass_detail(rb[k])}
                         for k in moved[:worst]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/timing_repeatability.py",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("copies", help="reference copies' speedups and intervals")
    c.add_argument("check_json", type=Path, help="the JSON of check --harness --out")
    d = sub.add_parser("drift", help="two baseline passes compared")
    d.add_argument("files", type=Path, nargs="+", metavar="A B",
                   help="the first pass's baseline file, then the second's; more pairs "
                        "(A2 B2 ...) when a pass was timed in parts (problems 1-50, 51-100)")
    args = p.parse_args(argv)
    if args.what == "drift" and len(args.files) % 2:
        print("timing_repeatability: drift takes files in pairs: A B [A2 B2 ...]",
              file=sys.stderr)
        return 2
    paths = [args.check_json] if args.what == "copies" else args.files
    for path in paths:
        if not path.is_file():
            print(f"timing_repeatability: no such file: {path}", file=sys.stderr)
            return 2
    try:
        result = (copies(args.check_json) if args.what == "copies"
                  else drift(args.files[0::2], args.files[1::2]))
    except (ValueError, KeyError, TypeError) as e:
        print(f"timing_repeatability: not a file the evaluator wrote: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
