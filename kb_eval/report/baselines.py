"""python -m kb_eval.report.baselines: eager, torch.compile and TVM baselines side by side.

Per hardware, source and precision under <results-dir>/baseline/, one row per problem:
each mode's median (ms), or its status where it failed, and the speedup over eager."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from kb_eval.cli import Parser, run_cli
from kb_eval.errors import UserError
from kb_eval.report.tables import markdown_table
from kb_eval.results import BaselineFile, read_model


def baseline_frame(results_dir: Path) -> pd.DataFrame:
    """One row per (hardware, source, precision, problem, mode)."""
    rows = []
    for path in sorted(Path(results_dir).glob("baseline/*/*/*.json")):
        data = read_model(path, BaselineFile)
        for rec in data.records.values():
            rows.append({"hardware": data.hardware.name, "source": path.parent.name,
                         "precision": data.precision, "mode": data.mode, "key": rec.key,
                         "name": rec.name, "status": rec.status,
                         "median_ms": rec.timing.median if rec.timing else None})
    return pd.DataFrame(rows, columns=["hardware", "source", "precision", "mode", "key",
                                       "name", "status", "median_ms"])


def side_by_side(frame: pd.DataFrame) -> dict[tuple, list[dict]]:
    """(hardware, source, precision) -> rows: problem, <mode> ms, <mode> x eager."""
    tables = {}
    for group, df in frame.groupby(["hardware", "source", "precision"], sort=True):
        modes = sorted(df["mode"].unique(), key=lambda m: (m != "eager", m))
        rows = []
        for key, per in df.groupby("key", sort=False):
            by_mode = per.set_index("mode")
            row = {"problem": key, "name": per["name"].iloc[0]}
            eager = _ms(by_mode, "eager")
            for mode in modes:
                ms = _ms(by_mode, mode)
                row[f"{mode} ms"] = (f"{ms:.4g}" if ms is not None else
                                     by_mode["status"].get(mode, "-"))
                if mode != "eager":
                    row[f"{mode} x"] = (f"{eager / ms:.2f}" if ms and eager else "-")
            rows.append(row)
        tables[group] = rows
    return tables


def _ms(by_mode: pd.DataFrame, mode: str) -> float | None:
    if mode not in by_mode.index:
        return None
    value = by_mode.loc[mode, "median_ms"]
    return None if pd.isna(value) else float(value)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m kb_eval.report.baselines",
               description="Eager, torch.compile and TVM baseline times side by side per "
                           "problem (speedup x = eager median / mode median).")
    p.add_argument("--results-dir", default="results",
                   help="root of result files (default: results)")
    args: argparse.Namespace = p.parse_args(argv)
    frame = baseline_frame(Path(args.results_dir).expanduser())
    if frame.empty:
        raise UserError(f"no baseline files under {args.results_dir}/baseline: run "
                        f"python -m kb_eval.baseline first")
    for (hardware, source, precision), rows in side_by_side(frame).items():
        print(f"## {source} on {hardware}, {precision}\n")
        print(markdown_table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
