"""Tables and pages of results: one run's summary, the configured models
(`--list-models`), and the leaderboard across runs:

    python -m kb_eval.report                          # every results/<model>/<run>/results.json
    python -m kb_eval.report --precision fp32 --markdown --csv lb.csv --html report.html

Runs are ranked only within a group of comparable runs (kb_eval.report.runs).
"""

from kb_eval.report.text import (models_table, samples_table, summary_table, text_table,
                                 usage_totals)


def main(argv: list[str] | None = None) -> int:
    """`python -m kb_eval.report`, imported on call: the tables above need no pandas."""
    from kb_eval.report.cli import main as report_main

    return report_main(argv)


__all__ = ["main", "models_table", "samples_table", "summary_table", "text_table",
           "usage_totals"]
