"""`python -m kb_eval.report`: the leaderboard of the runs under results/, one ranking per
group of comparable runs, as text, Markdown, CSV or an HTML page."""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.report.runs import GroupKey, RunEntry, find_runs, select_runs
from kb_eval.report.tables import (RunStats, level_rows, markdown_table, model_rows,
                                   run_stats)
from kb_eval.report.text import text_table

PRECISIONS = ("fp32", "fp16", "bf16")


def _parser(results_dir: Path):
    from kb_eval.cli import Parser

    p = Parser(prog="python -m kb_eval.report",
               description="Leaderboard of the runs under results/<model>/<run>/results.json. "
                           "Runs are ranked only against runs of the same hardware, precision, "
                           "backend, baseline kind (file or live) and problems asked; by "
                           "default each model's latest complete run of each such group.")
    p.add_argument("--results-dir", type=Path, default=results_dir,
                   help=f"where runs live (default: {results_dir})")
    p.add_argument("--precision", default=None, help="only runs at this precision "
                   f"({', '.join(PRECISIONS)})")
    p.add_argument("--model", default=None, help="only this model's runs")
    p.add_argument("--all-runs", action="store_true",
                   help="every run, incomplete and older ones too (default: each model's "
                        "latest complete run per group)")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--csv", type=Path, default=None, metavar="FILE",
                   help="also write the tables to this CSV file")
    p.add_argument("--html", type=Path, default=None, metavar="FILE",
                   help="also write a self-contained HTML page (tables, fast_p curves, "
                        "speedup distribution, a problem x model heat map with each "
                        "sample's verdict and code)")
    return p


def _configured_models() -> set[str]:
    try:
        from kb_eval.settings import load_settings

        return {ep.name for ep in load_settings().models} | {"reference"}
    except Exception:  # noqa: BLE001 - a broken config.py must not stop a report
        return {"reference"}


def check_args(args, entries: list[RunEntry]) -> None:
    """The user mistakes, each one line and exit 2 (kb_eval.cli.run_cli)."""
    if args.precision is not None and args.precision not in PRECISIONS:
        raise UserError(f"unknown --precision {args.precision!r}: one of "
                        f"{', '.join(PRECISIONS)}")
    if args.model is not None:
        with_runs = {e.model for e in entries} | {
            p.name for p in args.results_dir.iterdir() if p.is_dir() and p.name != "baseline"}
        if args.model not in with_runs | _configured_models():
            raise UserError(f"unknown --model {args.model!r}: runs exist for "
                            f"{', '.join(sorted(with_runs)) or 'no model'}")


def _notes(left_out: list[RunEntry], shown: list[RunEntry]) -> list[str]:
    notes = []
    for e in left_out:
        if e.unanswered:
            why = "failed: every sample an inference_error, nothing measured"
        elif not e.complete:
            why = f"incomplete, {e.missing} asked sample(s) without a record"
        else:
            newer = next((s for s in shown if s.model == e.model and s.key == e.key), None)
            why = f"older than {newer.run.run}" if newer else "superseded"
        notes.append(f"left out {e.model}/{e.run.run} ({why}); --all-runs shows it")
    return notes


def print_plain(groups: dict[GroupKey, list[RunStats]], markdown: bool) -> None:
    rich = None
    if not markdown and sys.stdout.isatty():
        try:
            import rich.console as rich
        except ImportError:
            rich = None
    for key, stats in groups.items():
        tables = (("models", model_rows(stats)), ("by level", level_rows(stats)))
        if markdown:
            print(f"\n## {key.label}\n")
            for title, rows in tables:
                print(f"**{title}**\n\n{markdown_table(rows)}\n")
        elif rich is not None:
            from kb_eval.report.tables import rich_table

            rich.Console().print(f"\n[bold]== {key.label}[/bold]", markup=True,
                                 highlight=False)
            for title, rows in tables:
                table, width = rich_table(title, rows)
                console = rich.Console()
                console.width = max(console.width, width)
                console.print(table)
        else:
            print(f"\n== {key.label}")
            for title, rows in tables:
                print(f"-- {title}\n{text_table(rows)}")


def csv_rows(groups: dict[GroupKey, list[RunStats]]) -> list[dict]:
    rows = []
    for key, stats in groups.items():
        where = {"hardware": key.hardware, "precision": key.precision, "backend": key.backend,
                 "baseline": key.baseline, "problem_set": key.problem_set}
        rows += [{**where, "level": "all", **r} for r in model_rows(stats)]
        rows += [{**where, **r} for r in level_rows(stats)]
    return rows


def write_out(path: Path, write) -> None:
    """Write a file the user named; a path that cannot be written is a user mistake."""
    try:
        with open(path, "w", encoding="utf-8", newline="") as f:
            write(f)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    print(f"wrote {path}")


def check_output(path: Path) -> None:
    """Check a --csv/--html path before any work, so a bad one is a one-line UserError."""
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder")
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: no folder {path.parent}")
    try:
        with tempfile.TemporaryFile(dir=path.parent, prefix=".kb_eval_probe_"):
            pass
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def _write_csv(f, rows: list[dict]) -> None:
    cols = list(dict.fromkeys(c for r in rows for c in r))
    w = csv.DictWriter(f, fieldnames=cols, restval="-")
    w.writeheader()
    w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    from kb_eval.settings import load_settings

    args = _parser(load_settings().defaults.results_dir).parse_args(argv)
    if not args.results_dir.is_dir():
        raise UserError(f"--results-dir {args.results_dir} does not exist")
    for path in (args.csv, args.html):
        if path is not None:
            check_output(path)
    entries = find_runs(args.results_dir)
    check_args(args, entries)
    entries = [e for e in entries if (args.precision in (None, e.run.precision))
               and (args.model in (None, e.model))]
    groups, left_out = select_runs(entries, all_runs=args.all_runs)
    notes = _notes(left_out, [e for es in groups.values() for e in es])
    for n in notes:
        print(("> " if args.markdown else "note: ") + n)
    if not groups:
        what = " complete" if left_out else ""
        print(f"no{what} runs under {args.results_dir}"
              + "".join(f" with --{k} {v}" for k, v in
                        (("precision", args.precision), ("model", args.model)) if v))
        return 0
    stats = {key: [run_stats(e) for e in es] for key, es in groups.items()}
    print_plain(stats, args.markdown)
    if args.csv:
        write_out(args.csv, lambda f: _write_csv(f, csv_rows(stats)))
    if args.html:
        from kb_eval.report.html import render_html

        page = render_html(stats, notes, all_runs=args.all_runs)
        write_out(args.html, lambda f: f.write(page))
    return 0
