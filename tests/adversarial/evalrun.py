"""Shared by the exploit and fault suites: run `python -m kb_eval.eval` on a list of
candidate files (a manifest, so one CLI run covers them all), read back the records, and
check a record against an expected verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from candidates.eval_kit import tuned_config

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBLEMS = HERE / "problems"
EXPLOITS = HERE / "exploits"
VERDICTS = HERE / "verdicts.json"


def load_verdicts() -> dict:
    return json.loads(VERDICTS.read_text())


def run_eval(entries: list[tuple[str, str, Path]], *, backend: str, results_dir: Path,
             cache_dir: Path, args: tuple[str, ...] = (), env: dict | None = None,
             settings: dict | None = None, problems: Path = PROBLEMS, timeout: float = 1200):
    """entries: (name, problem key 'level<N>/<id>', file). Candidates are evaluated in the
    order given (with --jobs 1 they also reach the device in that order). `settings`: the
    config's DEFAULTS beside cache_dir (warmup, correct_trials, run_timeout_s, ...).
    Returns the finished process, {name: record dict} and the results file's path."""
    cmd, full_env, names, path = eval_command(entries, backend=backend,
                                              results_dir=results_dir, cache_dir=cache_dir,
                                              args=args, env=env, settings=settings,
                                              problems=problems)
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    return proc, read_records(path, names), path


def eval_command(entries: list[tuple[str, str, Path]], *, backend: str, results_dir: Path,
                 cache_dir: Path, args: tuple[str, ...] = (), env: dict | None = None,
                 settings: dict | None = None, problems: Path = PROBLEMS):
    """The command line and environment of run_eval's run (its config.py, written under
    `results_dir`, sets cache_dir and `settings`), the names of its samples
    ({(key, sample): name}) and where its results file will be."""
    results_dir.mkdir(parents=True, exist_ok=True)
    per_problem: dict[str, int] = {}
    samples, names = [], {}
    for name, key, path in entries:
        sample = per_problem.setdefault(key, 0)
        per_problem[key] += 1
        samples.append({"key": key, "sample": sample, "path": str(Path(path).resolve())})
        names[(key, sample)] = name
    manifest = results_dir / "candidates.json"
    manifest.write_text(json.dumps({"samples": samples}, indent=1))
    cmd = [sys.executable, "-m", "kb_eval.eval", "--candidates", str(manifest),
           "--source", str(problems), "--backend", backend, "--live-baseline",
           "--name", "suite", "--run", "r1", "--results-dir", str(results_dir), *args]
    config = tuned_config(results_dir / "config", cache_dir=cache_dir, **(settings or {}))
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    full_env = {**os.environ, "PYTHONPATH": path, **config, **(env or {})}
    return cmd, full_env, names, results_dir / "suite" / "r1" / "results.json"


def read_records(path: Path, names: dict) -> dict:
    """{name: record dict} of the samples written to `path` so far."""
    records = {}
    if path.exists():
        for r in json.loads(path.read_text())["samples"]:
            key = f"level{r['level']}/{r['problem_id']}"
            records[names[(key, r["sample"])]] = r
    return records


def describe(r: dict) -> str:
    flags = [f"{f['code']}({f['severity']})" for f in r.get("flags", [])]
    return (f"status={r['status']} correct={r['correct']} speedup={r.get('speedup')} "
            f"measured={r.get('measured_speedup')} flags={flags} error={r.get('error')!r}")


def verdict_mismatches(r: dict, expect: dict) -> list[str]:
    """What differs between a record and its expected verdict (empty: as expected)."""
    from kb_eval.eval.judge.score import is_correct, is_fast
    from kb_eval.results import SampleRecord

    rec = SampleRecord.model_validate(r)
    codes = {f.code for f in rec.flags}
    bad = []
    if "correct" in expect and is_correct(rec) != expect["correct"]:
        bad.append(f"correct should be {expect['correct']}")
    wanted = expect.get("flagged", [])
    for code in [wanted] if isinstance(wanted, str) else wanted:
        if code not in codes:
            bad.append(f"flag {code} missing")
    if "speedup_counted" in expect and is_fast(rec, 0.0) != expect["speedup_counted"]:
        bad.append(f"speedup_counted should be {expect['speedup_counted']}")
    if "max_speedup" in expect:
        measured = r.get("measured_speedup", rec.speedup)
        if measured is not None and measured >= expect["max_speedup"]:
            bad.append(f"measured speedup {measured:.3g} >= {expect['max_speedup']}")
    if expect.get("no_flags") and any(f.severity != "info" for f in rec.flags):
        bad.append("should carry no warning/error flag")
    return bad
