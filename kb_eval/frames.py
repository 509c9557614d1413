"""results.json as a pandas DataFrame, in one call:

    from kb_eval.results import to_frame
    df = to_frame("results/reference/<run>/results.json")

One row per sample record (every turn), sorted by level, problem_id, sample, turn.
Nested fields are flattened with dots (`timing.median`, `sol.share`); `flags` becomes
"code1,code2", `flag_errors` counts the error-severity ones, `sol_counted` is the share
sol_p counts. The run's own facts (`model`, `run`, `hardware`, `run_precision`,
`run_backend`, `run_source`, `baseline_kind`) repeat on each row, so frames of several
runs concatenate. Kept out of kb_eval.results so that reading a results file needs no pandas.
"""

from __future__ import annotations

from pathlib import Path

SORT = ["level", "problem_id", "sample", "turn"]


def to_frame(path):
    """The samples of a results.json (or of the run folder that holds one)."""
    import pandas as pd

    from kb_eval.eval.judge.score import counted_sol
    from kb_eval.report.runs import baseline_kind
    from kb_eval.results import RunFile, read_model

    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    run = read_model(path, RunFile)
    run_cols = {"model": run.name, "run": run.run, "hardware": run.hardware.slug,
                "run_precision": run.precision, "run_backend": run.backend,
                "run_source": run.source,
                "baseline_kind": baseline_kind(run)}
    rows = []
    for r in run.samples:
        d = r.model_dump(mode="json")
        flags = d.pop("flags") or []
        d["flags"] = ",".join(f["code"] for f in flags)
        d["flag_errors"] = sum(f.get("severity") == "error" for f in flags)
        d["sol_counted"] = counted_sol(r)
        if d.get("model") is None:  # not the run stage's: the run's name stays
            d.pop("model", None)
        rows.append({**run_cols, **d})
    if not rows:
        return pd.DataFrame(columns=[*run_cols, "key", *SORT, "status"])
    frame = pd.json_normalize(rows, sep=".")
    return frame.sort_values(SORT, kind="stable").reset_index(drop=True)
