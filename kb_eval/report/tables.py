"""The report's tables, per run and per run and level, as display strings for every
format. Scores are recomputed from the records (judge/score.py), so per-level rows and
interrupted runs are scored like a whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kb_eval.eval.judge.score import FAST_P, PASS_K, fast_p_name, summarize_levels
from kb_eval.report.roofline import sol_cells
from kb_eval.report.runs import RunEntry
from kb_eval.report.text import pct, usage_totals
from kb_eval.results import RunSummary, level_of

MISSING = "-"
FAST_COLS = tuple(fast_p_name(p) for p in FAST_P)
PASS_COLS = tuple(f"pass@{k}" for k in PASS_K)


@dataclass
class RunStats:
    entry: RunEntry
    summary: RunSummary
    levels: dict[int, RunSummary]
    usage: dict
    wall_s: float | None


def _wall(run) -> float | None:
    """Seconds from the run file's creation to its last write (pauses included)."""
    try:
        span = datetime.fromisoformat(run.updated) - datetime.fromisoformat(run.created)
    except (TypeError, ValueError):
        return None
    return span.total_seconds() if span.total_seconds() > 0 else None


def run_stats(entry: RunEntry) -> RunStats:
    run = entry.run
    summary = summarize_levels(run.samples, run.problems_asked, run.samples_per_problem)
    levels = {int(name.removeprefix("level")): s for name, s in summary.levels.items()}
    # From the records rather than the file's `usage`, like the per-level rows.
    return RunStats(entry, summary, levels, usage_totals(run.samples), _wall(run))


# ------------------------------------------------------------------ formatting
def money(x: float | None) -> str:
    return MISSING if x is None else f"${x:.4f}"


def times(x: float | None) -> str:
    return MISSING if not x else f"{x:.3f}x"


def duration(s: float | None) -> str:
    if s is None:
        return MISSING
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def score_cells(s: RunSummary, asked: int) -> dict:
    cells = {"problems": asked, "compiled": pct(s.compiled_rate),
             "correct": pct(s.correct_rate)}
    cells.update({name: pct(s.fast_p.get(name)) for name in FAST_COLS})
    # fast_1 counting only speedups whose 95 % interval lies above 1 (judge/confidence.py)
    cells["fast_1_sig"] = pct(s.fast_p_sig.get("fast_1")) if s.fast_p_sig else MISSING
    cells.update(sol_cells(s))  # share of problems at >= p of the speed of light
    cells["geomean"] = times(s.geomean_speedup)
    cells.update({name: pct(s.pass_at_k.get(name)) for name in PASS_COLS})
    return cells


def _tokens(usage: dict) -> int | str:
    if not usage.get("answers"):
        return MISSING
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


def rank_order(stats: list[RunStats]) -> list[RunStats]:
    """Best first: fast_1, correct, geomean speedup; failed runs last, unranked."""
    return sorted(stats, key=lambda st: (st.entry.unanswered,
                                         -st.summary.fast_p.get("fast_1", 0.0),
                                         -st.summary.correct_rate,
                                         -(st.summary.geomean_speedup or 0.0),
                                         st.entry.model))


def completeness(entry: RunEntry) -> str:
    if entry.unanswered:
        return "failed: no answers (inference_error), not scored; --resume retries"
    return "yes" if entry.complete else f"no ({entry.missing} missing)"


def model_rows(stats: list[RunStats]) -> list[dict]:
    rows = []
    for i, st in enumerate(rank_order(stats), start=1):
        row = {"#": MISSING if st.entry.unanswered else i, "model": st.entry.model,
               "run": st.entry.run.run, "complete": completeness(st.entry),
               "samples/problem": st.entry.run.samples_per_problem}
        row.update(score_cells(st.summary, len(set(st.entry.run.problems_asked))))
        row.update({"tokens": _tokens(st.usage), "cost": money(st.usage.get("cost_usd")),
                    "wall": duration(st.wall_s)})
        rows.append(row)
    return rows


def level_rows(stats: list[RunStats]) -> list[dict]:
    rows = []
    for st in rank_order(stats):
        run = st.entry.run
        for lvl, s in st.levels.items():
            recs = [r for r in run.samples if level_of(r.key) == lvl]
            usage = usage_totals(recs)
            keys = {k for k in run.problems_asked if level_of(k) == lvl}
            row = {"level": lvl, "model": st.entry.model, "run": run.run}
            row.update(score_cells(s, len(keys)))
            row.update({"tokens": _tokens(usage), "cost": money(usage.get("cost_usd"))})
            rows.append(row)
    return sorted(rows, key=lambda r: r["level"])


# ------------------------------------------------------------------ plain outputs
def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    esc = [[str(r[c]).replace("|", "\\|") for c in cols] for r in rows]
    return "\n".join(["| " + " | ".join(cols) + " |",
                      "|" + "|".join("---:" if isinstance(rows[0][c], int) else "---"
                                     for c in cols) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def rich_table(title: str, rows: list[dict]):
    """A rich Table of the rows and the console width that shows every cell whole."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    width = 1
    for col in rows[0]:
        need = max(len(str(col)), *(len(str(r[col])) for r in rows))
        table.add_column(str(col), justify="left" if col in ("model", "run", "complete")
                         else "right", no_wrap=True, min_width=need)
        width += need + 3
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    return table, width
