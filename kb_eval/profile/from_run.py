"""--model NAME --run RUN: the candidate a run answered for a problem, found through its
results.json records' `code_path`."""

from __future__ import annotations

import json
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.results import slugify


def _listing(folder: Path, wanted: str) -> str:
    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    names = [n for n in names if n != "baseline"]
    return f"{wanted} there: {', '.join(names[:12])}" if names else f"no {wanted} there"


def run_records(results_dir: Path, model: str, run: str) -> tuple[Path, list[dict]]:
    """(the run's folder, its sample records); a missing model or run is a UserError."""
    model_dir = Path(results_dir).expanduser() / slugify(model)
    if not model_dir.is_dir():
        raise UserError(f"--model {model}: no results at {model_dir} "
                        f"({_listing(model_dir.parent, 'models')})")
    if run == "latest":  # run folders are named by their start time unless --run named them
        written = sorted(model_dir.glob("*/results.json"), key=lambda f: f.stat().st_mtime)
        if not written:
            raise UserError(f"--run latest: no run under {model_dir}")
        run = written[-1].parent.name
    path = model_dir / run / "results.json"
    if not path.is_file():
        raise UserError(f"--run {run}: {path} does not exist ({_listing(model_dir, 'runs')})")
    try:
        samples = json.loads(path.read_text())["samples"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"--run {run}: {path} is not a run's results.json ({e})") from None
    return path.parent, [s for s in samples if isinstance(s, dict)]


def pick_record(records: list[dict], key: str, sample: int | None) -> dict:
    """The record to profile: `sample`'s last turn, or the best correct, else sample 0's."""
    mine = [r for r in records if r.get("key") == key and r.get("code_path")]
    if sample is not None:
        mine = [r for r in mine if r.get("sample") == sample]
    if not mine:
        which = f"sample {sample} of " if sample is not None else ""
        raise UserError(f"the run has no saved code for {which}{key} (records made by "
                        f"kb_eval.eval keep none: profile the file with --solution)")
    correct = [r for r in mine if r.get("correct")]
    if correct and sample is None:
        return max(correct, key=lambda r: (r.get("speedup") or 0.0, -r.get("sample", 0)))
    first = min(r.get("sample", 0) for r in mine)
    return max((r for r in mine if r.get("sample", 0) == first), key=lambda r: r.get("turn", 0))


def solution_from_run(results_dir: Path, model: str, run: str, key: str,
                      sample: int | None) -> tuple[Path, dict]:
    """(the candidate's code file, its record) for problem `key` in the run."""
    run_dir, records = run_records(results_dir, model, run)
    record = pick_record(records, key, sample)
    path = run_dir / record["code_path"]
    if not path.is_file():
        raise UserError(f"{path} (the code of {key} sample {record.get('sample')}) is missing")
    return path, record
