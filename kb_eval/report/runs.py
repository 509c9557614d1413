"""Which runs a report compares: runs of the same hardware, precision, backend, baseline
kind and problems form a group, ranked only within itself; by default each model's latest
complete run. A run of only `inference_error`s is shown as failed, not scored.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.results import RunFile, read_model


@dataclass(frozen=True, order=True)
class GroupKey:
    hardware: str
    precision: str
    backend: str
    baseline: str  # live | file | file (compile-...)
    source: str
    problems: tuple[str, ...] = field(repr=False)

    @property
    def problem_set(self) -> str:
        """The source and a fingerprint of the problems asked."""
        digest = hashlib.sha256("\n".join(self.problems).encode()).hexdigest()[:8]
        return f"{self.source} ({len(self.problems)} problems, #{digest})"

    @property
    def label(self) -> str:
        return " / ".join((self.hardware, self.precision, self.backend,
                           f"baseline {self.baseline}", self.problem_set))


@dataclass
class RunEntry:
    path: Path
    run: RunFile
    key: GroupKey
    complete: bool
    missing: int  # asked (problem, sample) slots without a record
    unanswered: bool = False  # every record an inference_error: nothing was measured

    @property
    def model(self) -> str:
        return self.run.name or self.path.parts[-3]

    @property
    def run_dir(self) -> Path:
        return self.path.parent


def baseline_kind(run: RunFile) -> str:
    """live or file, with a compiled baseline's mode: never eager's kind."""
    where = run.baseline or next((r.baseline_source for r in run.samples
                                  if r.baseline_source), "")
    if where == "live":
        mode = run.config.get("baseline_mode") or "eager"
        return "live" if mode == "eager" else f"live ({mode})"
    if not where:
        return "unknown"
    stem = Path(where).stem
    return f"file ({stem.split('_', 1)[1]})" if "_" in stem else "file"  # fp32[_<mode>]


def group_key(run: RunFile) -> GroupKey:
    asked = tuple(sorted(dict.fromkeys(run.problems_asked)))
    return GroupKey(run.hardware.slug, run.precision, run.backend, baseline_kind(run),
                    run.source, asked)


def missing_slots(run: RunFile) -> int:
    """Asked (problem, sample) pairs with no record at all (any turn, any status)."""
    have = {(r.key, r.sample) for r in run.samples}
    asked = dict.fromkeys(run.problems_asked)
    return sum((key, s) not in have for key in asked for s in range(run.samples_per_problem))


def never_answered(run: RunFile) -> bool:
    """Records exist and every one is an inference_error (the model could not be asked)."""
    return bool(run.samples) and all(r.status == "inference_error" for r in run.samples)


def find_runs(results_dir: Path) -> list[RunEntry]:
    """Every results/<model>/<run>/results.json; a broken one is named on stderr, skipped."""
    entries = []
    for path in sorted(Path(results_dir).glob("*/*/results.json")):
        if path.parts[-3] == "baseline":
            continue
        try:
            run = read_model(path, RunFile)
        except Exception as e:  # noqa: BLE001 - one broken file must not hide the others
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        missing, failed = missing_slots(run), never_answered(run)
        entries.append(RunEntry(path, run, group_key(run), missing == 0 and not failed,
                                missing, failed))
    return entries


def _recency(e: RunEntry) -> tuple:
    return (e.run.updated, e.run.created, e.run.run)


def select_runs(entries: list[RunEntry], all_runs: bool = False
                ) -> tuple[dict[GroupKey, list[RunEntry]], list[RunEntry]]:
    """Runs by group, and those left out (by default: incomplete, and older complete ones)."""
    groups: dict[GroupKey, list[RunEntry]] = {}
    left_out: list[RunEntry] = []
    for e in sorted(entries, key=_recency, reverse=True):
        rows = groups.setdefault(e.key, [])
        if all_runs:
            rows.append(e)
        elif e.complete and all(o.model != e.model for o in rows):
            rows.append(e)
        else:
            left_out.append(e)
    groups = {k: v for k, v in sorted(groups.items()) if v}
    return groups, left_out
