"""Tables of results: one run's summary (printed by `python -m kb_eval.run`), the
configured models (`--list-models`), and a leaderboard across runs:

    python -m kb_eval.report                     # every results/<model>/<run>/results.json
    python -m kb_eval.report --results-dir DIR --precision fp32

Rows of the leaderboard are runs; runs made on different hardware, precision or backend
are listed apart (their speedups are not comparable) and never averaged together.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from kb_eval.results import RunFile, SampleRecord, read_model

USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "cost", "latency_s")


def text_table(rows: list[dict]) -> str:
    """Rows of equal keys as left-aligned columns (numbers right-aligned)."""
    if not rows:
        return ""
    cols = list(rows[0])
    cells = [[str(c) for c in cols]] + [["-" if r[c] is None else str(r[c]) for c in cols]
                                         for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    numeric = [all(isinstance(r[c], (int, float)) for r in rows) for c in cols]
    lines = []
    for row in cells:
        lines.append("  ".join(v.rjust(w) if num else v.ljust(w)
                               for v, w, num in zip(row, width, numeric)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------ inference usage
def usage_totals(records: Iterable[SampleRecord]) -> dict:
    """Tokens, cost and answers over the records that carry inference fields (run stage)."""
    totals = {"answers": 0, "cached_answers": 0, "prompt_tokens": 0, "completion_tokens": 0,
              "cost_usd": None, "latency_s": 0.0}
    for r in records:
        extra = r.model_extra or {}
        if "prompt_tokens" not in extra:
            continue
        totals["answers"] += 1
        totals["cached_answers"] += bool(extra.get("response_cached"))
        totals["prompt_tokens"] += int(extra.get("prompt_tokens") or 0)
        totals["completion_tokens"] += int(extra.get("completion_tokens") or 0)
        totals["latency_s"] += float(extra.get("latency_s") or 0.0)
        if extra.get("cost") is not None:
            totals["cost_usd"] = (totals["cost_usd"] or 0.0) + float(extra["cost"])
    totals["latency_s"] = round(totals["latency_s"], 3)
    return totals


# ------------------------------------------------------------------ one run
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _money(x: float | None) -> str:
    return "n/a (no prices in config.py)" if x is None else f"${x:.4f}"


def summary_table(run: RunFile) -> str:
    """The run's scores as a two-column table."""
    s = run.summary
    if s is None:
        return "(no summary)"
    usage = getattr(run, "usage", None) or usage_totals(run.samples)
    rows = [("problems asked", s.problems), ("samples per problem", s.samples_per_problem),
            ("samples recorded (last turns)", s.samples),
            ("compiled rate", _pct(s.compiled_rate)), ("correct rate", _pct(s.correct_rate))]
    rows += [(name, _pct(v)) for name, v in s.fast_p.items() if name in ("fast_1", "fast_2")]
    rows += [(name, _pct(v)) for name, v in s.fast_p.items() if name not in ("fast_1", "fast_2")]
    geo = f"{s.geomean_speedup:.3f}x" if s.geomean_speedup else "n/a"
    rows.append(("geomean speedup (correct)", geo))
    rows += [(name, _pct(v)) for name, v in s.pass_at_k.items()]
    rows.append(("status counts", ", ".join(f"{k} {v}" for k, v in
                                            sorted(s.status_counts.items())) or "-"))
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    rows += [("answers (cached)", f"{usage['answers']} ({usage['cached_answers']})"),
             ("tokens (prompt + completion)",
              f"{tokens} ({usage['prompt_tokens']} + {usage['completion_tokens']})"),
             ("cost", _money(usage["cost_usd"]))]
    return text_table([{"metric": m, "value": str(v)} for m, v in rows])


def samples_table(run: RunFile, max_rows: int = 40) -> str | None:
    """One row per recorded sample turn (None when there are more than max_rows)."""
    if not run.samples or len(run.samples) > max_rows:
        return None
    rows = [{"problem": r.key, "sample": r.sample, "turn": r.turn, "status": r.status,
             "speedup": f"{r.speedup:.2f}x" if r.speedup else "-",
             "error": (r.error or "")[:60]} for r in
            sorted(run.samples, key=lambda r: (r.level, r.problem_id, r.sample, r.turn))]
    return text_table(rows)


# ------------------------------------------------------------------ models
def models_table(endpoints: list) -> str:
    """--list-models: name, endpoint, model id, key env var (set?), concurrency, prices."""
    rows = [{"name": "reference", "endpoint": "(built-in, offline)",
             "model id": "reference_kernels/solutions", "api key": "-", "concurrency": 4,
             "$/Mtok in": "0", "$/Mtok out": "0"}]
    for ep in endpoints:
        if ep.api_key_env:
            key = f"{ep.api_key_env} ({'set' if os.environ.get(ep.api_key_env, '').strip() else 'NOT set'})"
        else:
            key = "- (none needed)"
        rows.append({"name": ep.name, "endpoint": ep.base_url, "model id": ep.model,
                     "api key": key, "concurrency": ep.max_concurrency,
                     "$/Mtok in": _price(ep.price_in_per_mtok),
                     "$/Mtok out": _price(ep.price_out_per_mtok)})
    return text_table(rows)


def _price(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


# ------------------------------------------------------------------ leaderboard
def find_runs(results_dir: Path) -> list[tuple[Path, RunFile]]:
    runs = []
    for path in sorted(Path(results_dir).glob("*/*/results.json")):
        if path.parts[-3] == "baseline":
            continue
        try:
            runs.append((path, read_model(path, RunFile)))
        except Exception as e:  # noqa: BLE001 - one broken file must not hide the others
            print(f"skipping {path}: {e}")
    return runs


def leaderboard(runs: list[tuple[Path, RunFile]]):
    import pandas as pd

    rows = []
    for _, run in runs:
        s = run.summary
        if s is None:
            continue
        usage = getattr(run, "usage", None) or usage_totals(run.samples)
        args = getattr(run, "run_args", None) or {}
        rows.append({
            "model": run.name, "run": run.run, "hardware": run.hardware.slug,
            "precision": run.precision, "backend": run.backend, "source": run.source,
            "prompt": args.get("prompt", "-"), "turns": args.get("turns", 1),
            "problems": s.problems, "k": s.samples_per_problem,
            "compiled": round(s.compiled_rate, 3), "correct": round(s.correct_rate, 3),
            "fast_1": round(s.fast_p.get("fast_1", 0.0), 3),
            "fast_2": round(s.fast_p.get("fast_2", 0.0), 3),
            "geomean": round(s.geomean_speedup, 3) if s.geomean_speedup else None,
            "pass@1": round(s.pass_at_k.get("pass@1", 0.0), 3),
            "tokens": usage["prompt_tokens"] + usage["completion_tokens"],
            "cost_usd": None if usage["cost_usd"] is None else round(usage["cost_usd"], 4),
        })
    table = pd.DataFrame(rows)
    if not table.empty:
        table = table.sort_values(["hardware", "precision", "backend", "source", "fast_1",
                                   "correct"], ascending=[True, True, True, True, False, False])
    return table


def main(argv: list[str] | None = None) -> int:
    from kb_eval.cli import Parser
    from kb_eval.settings import load_settings

    defaults = load_settings().defaults
    p = Parser(prog="python -m kb_eval.report",
               description="Leaderboard of the runs under results/<model>/<run>/results.json, "
                           "grouped by hardware, precision, backend and problem source.")
    p.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                   help=f"where runs live (default: {defaults.results_dir})")
    p.add_argument("--precision", default=None, help="only runs at this precision")
    p.add_argument("--model", default=None, help="only this model's runs")
    p.add_argument("--csv", type=Path, default=None, help="also write the table to this CSV")
    args = p.parse_args(argv)
    runs = [(path, run) for path, run in find_runs(args.results_dir)
            if (args.precision is None or run.precision == args.precision)
            and (args.model is None or run.name == args.model)]
    table = leaderboard(runs)
    if table.empty:
        print(f"no runs under {args.results_dir}")
        return 0
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", None):
        for group, rows in table.groupby(["hardware", "precision", "backend", "source"],
                                         sort=False):
            print(f"\n== {' / '.join(map(str, group))}")
            print(rows.drop(columns=["hardware", "precision", "backend", "source"])
                  .to_string(index=False))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    import sys

    from kb_eval.cli import run_cli

    sys.exit(run_cli(main))
