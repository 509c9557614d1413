"""Run `check --harness` over KernelBench levels and print one line per level: how many
problems the evaluator can judge on this machine, what remains and why, and the wall time.

    python benchmarks/kernelbench_harness.py --source ../shared/kernelbench --levels 1 2 3 \
        --out results/harness [--trials 20] [--problems 1-50] [--lane-depth 1] \
        [--timing-budget-ms 100] [--together]

Each level's JSON report lands in --out (harness_level<N>.json); its summary is printed as
the level ends. `--together` runs the levels in one `check --harness` (one reference
server, no drain between levels: harness_levels<1-2-3>.json), then prints each level's
part of it and the whole (the figures quoted for the GPU machine in the closing notes), with the
device busy share and phase medians of eval_throughput.py (this is issue 15's sweep (b)).
Unless --lane-depth is 1, problems not judged correct are evaluated again one at a time
(harness_level<N>_serial.json), so a fault of the overlap is told apart from the problem's.
--lane-depth and --timing-budget-ms are check's config DEFAULTS (it has no such flags): they
go to it in a config.py written beside the reports (KB_EVAL_CONFIG).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_throughput import busy_share, phase_medians  # noqa: E402


def run_level(args, level: int | list[int], problems: str | None, lane_depth: int | None,
              tag: str) -> dict:
    levels = level if isinstance(level, list) else [level]
    name = f"level{level}" if len(levels) == 1 else "levels" + "-".join(map(str, levels))
    out = Path(args.out) / f"harness_{name}{tag}.json"
    cmd = [sys.executable, "-m", "kb_eval.check", "--harness", "--source", args.source,
           "--level", *map(str, levels), "--out", str(out)]
    if problems:
        cmd += ["--problems", problems]
    if args.trials is not None:
        cmd += ["--trials", str(args.trials)]
    if args.no_sandbox:
        cmd.append("--no-sandbox")
    tuning = {k: v for k, v in (("lane_depth", lane_depth),
                                ("timing_budget_ms", args.timing_budget_ms)) if v is not None}
    env = None
    if tuning:
        config = Path(args.out) / f"config_{name}{tag}.py"
        config.write_text(f"MODELS = []\nDEFAULTS = {tuning!r}\n")
        env = {**os.environ, "KB_EVAL_CONFIG": str(config.resolve())}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        rc = "timeout"  # the report holds every problem judged until then
    wall = time.monotonic() - t0
    rows = json.loads(out.read_text())["problems"] if out.exists() else []
    return {"level": level, "rc": rc, "wall_s": round(wall, 1), "rows": rows,
            "lane_depth": lane_depth}


STOP_GRACE_S = 20.0


def stop(proc: subprocess.Popen) -> None:
    """End `check` as a timeout should: SIGTERM (it stops as on Ctrl-C: its children
    ended, its scratch removed, what was judged saved), SIGKILL only if it is still there
    after STOP_GRACE_S. Killed outright, it left a stopped candidate holding device memory
    and its output files in /dev/shm for the next run on that machine."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def level_part(together: dict, level: int) -> dict:
    """One level's rows of a run over several levels, its wall time left out (they ran
    interleaved): the summary's per-problem time is the whole run's."""
    rows = [x for x in together["rows"] if x["key"].split("/")[-2] == f"level{level}"]
    return {**together, "level": level, "rows": rows, "wall_s": None}


def summary(r: dict) -> str:
    rows = r["rows"]
    statuses = Counter(x["status"] for x in rows)
    copy = sorted(x["speedup"] for x in rows if x["speedup"])
    within = sum(0.97 <= s <= 1.03 for s in copy)
    med = copy[len(copy) // 2] if copy else float("nan")
    bad = [f"{x['key']} {x['status']}: {(x['reason'] or '')[:120]}" for x in rows
           if not x["judgeable"]]
    unpaired = [f"{x['key']}: {(x.get('unpaired') or '')[:160]}" for x in rows
                if "unpaired" in (x.get("flags") or [])]
    nondet = sum(x["deterministic"] is False for x in rows)
    cis = [x["speedup_ci"] for x in rows if x.get("speedup_ci")]
    holds = sum(lo <= 1.0 <= hi for lo, hi in cis)
    wall = (f"wall {r['wall_s']} s ({r['wall_s'] / max(len(rows), 1):.2f} s/problem)"
            if r["wall_s"] is not None else "run with the other levels")
    text = (f"level {r['level']}: {len(rows)} problems, {dict(statuses)}, rc {r['rc']}, "
            f"{wall}; copy "
            f"speedup median {med:.3f}, {within}/{len(copy)} within [0.97, 1.03]; intervals "
            f"holding 1.0: {holds}/{len(cis)}, above it (fast_1_sig): "
            f"{sum(lo > 1.0 for lo, _ in cis)}; non-deterministic references {nondet}; "
            f"unpaired {len(unpaired)}")
    shares = sorted(x["sol"]["share"] for x in rows if (x.get("sol") or {}).get("share"))
    if shares:
        q = [shares[min(int(f * len(shares)), len(shares) - 1)] for f in (0.1, 0.5, 0.9)]
        text += (f"\n   speed-of-light share of {len(shares)} copies: p10 {q[0]:.1%}, "
                 f"median {q[1]:.1%}, p90 {q[2]:.1%}, max {shares[-1]:.1%}, "
                 f"over 100 %: {sum(s > 1.0 for s in shares)}")
    phases = [x.get("phases") or {} for x in rows]
    shares = [] if r["wall_s"] is None else ["   " + busy_share(phases, r["wall_s"], 1)]
    return "\n".join([text] + shares + ["   " + phase_medians(phases)]
                     + [f"   not judgeable: {b}" for b in bad]
                     + [f"   unpaired: {u}" for u in unpaired])


def serial_retry(args, first: dict) -> dict | None:
    """Problems the overlapped pass did not judge correct, once more one at a time."""
    ids = [x["key"].rsplit("/", 1)[-1] for x in first["rows"] if not x["judgeable"]]
    if first["lane_depth"] == 1 or not ids:  # None: check's default, 3 on a GPU
        return None
    return run_level(args, first["level"], ",".join(ids), 1, args.tag + "_serial")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, help="a KernelBench-layout folder")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--problems", default=None, help="ids and ranges within each level")
    p.add_argument("--trials", type=int, default=None,
                   help="timed calls per copy (default: check's, with its time budget)")
    p.add_argument("--timing-budget-ms", type=float, default=None,
                   help="check's DEFAULTS[\"timing_budget_ms\"] (default: the config's)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="check's: copies run outside the sandbox (to measure what it costs)")
    p.add_argument("--out", default="results/harness", help="folder for the JSON reports")
    p.add_argument("--tag", default="", help="suffix for the report names")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per level (with --together: for the whole run) at most; "
                        "then check is stopped with SIGTERM (up to 20 s to end its children "
                        "and save what it judged), SIGKILL only after")
    p.add_argument("--together", action="store_true",
                   help="all --levels in one check --harness run (one reference server, "
                        "no drain between levels), summed up per level and in all")
    p.add_argument("--lane-depth", type=int, default=None, help="copies in flight per GPU "
                   "(check's DEFAULTS[\"lane_depth\"]; default: check's, 3 on a GPU)")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    levels = sorted(set(args.levels)) if args.together else args.levels
    whole = (run_level(args, levels, args.problems, args.lane_depth, args.tag)
             if args.together else None)
    results = []
    for level in levels:
        results.append(level_part(whole, level) if whole else
                       run_level(args, level, args.problems, args.lane_depth, args.tag))
        print(summary(results[-1]), flush=True)
        retry = serial_retry(args, results[-1])
        if retry:
            print("   serial re-run of those: " + summary(retry), flush=True)
    if whole:
        print(summary({**whole, "level": "all"}), flush=True)
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
