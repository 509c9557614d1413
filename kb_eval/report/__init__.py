"""Tables and pages of results: one run's summary (printed by `python -m kb_eval.run`),
the configured models (`--list-models`), and the leaderboard across runs:

    python -m kb_eval.report                          # every results/<model>/<run>/results.json
    python -m kb_eval.report --precision fp32 --markdown --csv lb.csv --html report.html

Runs are ranked only within a group of comparable runs (same hardware, precision,
backend, baseline kind and problems asked: kb_eval.report.runs); by default each model
counts with its latest complete run of a group.

    text.py   plain tables of one run and of the models    runs.py   finding and grouping runs
    tables.py leaderboard rows (shared by every format)    cli.py    the command line
    plots.py  fast_p curve, speedup distribution (PNG)     html.py   the self-contained page
    samples.py what a clicked sample shows (verdict and code)
"""

from kb_eval.report.text import (models_table, samples_table, summary_table, text_table,
                                 usage_totals)


def main(argv: list[str] | None = None) -> int:
    """`python -m kb_eval.report` (imported on call: the tables above need no pandas or
    scoring code, and kb_eval.run imports them)."""
    from kb_eval.report.cli import main as report_main

    return report_main(argv)


__all__ = ["main", "models_table", "samples_table", "summary_table", "text_table",
           "usage_totals"]
