"""python -m kb_eval.check --harness: can this evaluator judge these problems on this machine?

Each problem's own reference is evaluated as the candidate (`ModelNew = Model`) through
the real eval path: it must be judged correct at a speedup of about 1, else the problem
cannot tell a right kernel from a wrong one here. One row per problem (printed and JSON);
exit 0 when every problem is judgeable, 1 otherwise.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from tqdm import tqdm

from kb_eval.problems import Problem, reference_copy
from kb_eval.results import SampleRecord, slugify, write_json_atomic


def row_of(record: SampleRecord) -> dict:
    """One problem's line of the report, from the copy's record."""
    mem = record.memory or {}
    ok = record.status == "correct"
    return {"key": record.key, "name": record.name, "judgeable": ok, "status": record.status,
            "reason": None if ok else (record.error or record.status),
            "speedup": record.speedup, "speedup_ci": record.speedup_ci,
            "speedup_ci_method": record.speedup_ci_method,
            "median_ms": {"copy": getattr(record.timing, "median", None),
                          "reference": getattr(record.baseline, "median", None)},
            # launch-bound when near the median: then the speedup is host launch speed
            "launch_ms": {"copy": getattr(record.timing, "launch_ms", None),
                          "reference": getattr(record.baseline, "launch_ms", None)},
            "deterministic": record.reference_deterministic,
            "reference_need_bytes": mem.get("reference_need") or mem.get("reference_peak"),
            "reference_peak_bytes": mem.get("reference_peak"),
            "copy_peak_bytes": mem.get("candidate_peak"), "wall_s": record.wall_s,
            "retried": record.retried, "flags": [f.code for f in record.flags],
            # why its interval is not a paired one
            "unpaired": next((f.message for f in record.flags if f.code == "unpaired"), None),
            "phases": record.phases,
            "sol": record.sol.model_dump() if record.sol else None}


def _gib(n) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f}"


def format_rows(rows: list[dict]) -> str:
    head = ("problem", "name", "verdict", "ref GiB", "copy GiB", "determ.", "speedup",
            "wall s", "why not judgeable")
    lines = [head] + [(r["key"], r["name"][:26], r["status"],
                       _gib(r["reference_peak_bytes"] or r["reference_need_bytes"]),
                       _gib(r["copy_peak_bytes"]),
                       {True: "yes", False: "NO", None: "-"}[r["deterministic"]],
                       "-" if r["speedup"] is None else f"{r['speedup']:.3f}",
                       f"{r['wall_s']:.1f}", (r["reason"] or "")[:90]) for r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)) + "  " + line[-1]
                     for line in lines)


def summary_line(rows: list[dict], wall_s: float) -> str:
    bad = [r for r in rows if not r["judgeable"]]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    head = (f"{len(rows) - len(bad)} of {len(rows)} problem(s) judgeable here"
            if bad else f"all {len(rows)} problem(s) judgeable here")
    return f"{head} ({parts}); {wall_s:.0f} s"


def interleave_levels(problems: list[Problem]) -> list[Problem]:
    """The problems of several levels taken in turns, so that small problems can run
    beside a large one while the next large one waits for room on the device."""
    by_level: dict[int, list[Problem]] = {}
    for p in problems:
        by_level.setdefault(p.level, []).append(p)
    turns = itertools.zip_longest(*by_level.values())
    return [p for turn in turns for p in turn if p is not None]


def run_harness_check(problems: list[Problem], config, out_path: Path | None,
                      source: str) -> int:
    """Evaluate each problem's reference copy; print the table, write the JSON (default
    results/check/<hardware>/harness_<source>_<precision>.json), return the exit code."""
    from kb_eval.eval import evaluate, prepare

    ctx = prepare(config)
    out_path = out_path or default_out(config.results_dir, ctx.hardware.slug, source,
                                       config.precision)
    t0 = time.monotonic()
    records = {}
    pairs = [(p, 0, reference_copy(p)) for p in interleave_levels(problems)]
    head = {"hardware": ctx.hardware.model_dump(), "precision": config.precision,
            "backend": ctx.backend}

    def rows_so_far() -> list[dict]:
        return [row_of(records[p.key]) for p in problems if p.key in records]

    with tqdm(total=len(pairs), desc="check --harness", unit="problem", leave=False) as bar:
        for record in evaluate(pairs, context=ctx):
            records[record.key] = record
            bar.set_postfix_str(f"{record.key} {record.status}")
            bar.update()
            # Rewritten after every problem: an interrupted check keeps what it judged.
            write_json_atomic(out_path, {**head, "complete": False,
                                         "wall_s": round(time.monotonic() - t0, 1),
                                         "problems": rows_so_far()})
    rows, wall = rows_so_far(), time.monotonic() - t0
    print(format_rows(rows))
    print("\n" + summary_line(rows, wall))
    write_json_atomic(out_path, {**head, "complete": True, "wall_s": round(wall, 1),
                                 "problems": rows})
    print(f"written: {out_path}")
    return 0 if rows and all(r["judgeable"] for r in rows) else 1


def default_out(results_dir: Path, hw_slug: str, source: str, precision: str) -> Path:
    name = slugify(Path(str(source)).name or str(source))
    return Path(results_dir) / "check" / hw_slug / f"harness_{name}_{precision}.json"
