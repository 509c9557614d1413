"""What the HTML report shows of a clicked sample: its verdict and the judged code, found
by the record's `code_path` or else by `source_sha256` in the run's code/ folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kb_eval.eval.judge.score import counted_speedup, is_correct
from kb_eval.report.roofline import sol_text
from kb_eval.report.text import last_turns
from kb_eval.results import SampleRecord

MAX_CODE_CHARS = 200_000  # one huge answer must not make the page unusable
MAX_DETAIL_CHARS = 4_000


class CodeFinder:
    """The code of a run's records, hashed at most once per file."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._by_sha: dict[str, Path] | None = None

    def _index(self) -> dict[str, Path]:
        if self._by_sha is None:
            self._by_sha = {}
            for path in sorted((self.run_dir / "code").glob("**/*.py")):
                try:
                    self._by_sha[hashlib.sha256(path.read_bytes()).hexdigest()] = path
                except OSError:
                    continue
        return self._by_sha

    def code(self, r: SampleRecord) -> str | None:
        rel = r.code_path
        candidates = [self.run_dir / rel] if rel else []
        if r.source_sha256:
            candidates.append(self._index().get(r.source_sha256))
        for path in filter(None, candidates):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if len(text) > MAX_CODE_CHARS:
                text = text[:MAX_CODE_CHARS] + f"\n# ... cut at {MAX_CODE_CHARS} characters"
            return text
        return None


def sample_view(r: SampleRecord, finder: CodeFinder) -> dict:
    """The JSON the page's detail panel renders (as text, never as HTML)."""
    detail = r.detail or (r.crash.output_tail if r.crash else None)
    return {
        "key": r.key, "name": r.name, "sample": r.sample, "turn": r.turn,
        "status": r.status, "compiled": r.compiled, "correct": is_correct(r),
        "error": r.error, "detail": detail[-MAX_DETAIL_CHARS:] if detail else None,
        "flags": [f"{f.severity}: {f.code}" + (f" - {f.message}" if f.message else "")
                  for f in r.flags],
        "speedup": r.speedup, "counted_speedup": counted_speedup(r),
        "speedup_ci": r.speedup_ci,
        "candidate_ms": r.timing.median if r.timing else None,
        "baseline_ms": r.baseline.median if r.baseline else None,
        "launches": launches_text(r), "source_sha256": r.source_sha256,
        "sol": sol_text(r),
        "code": finder.code(r),
    }


def launches_text(r: SampleRecord) -> str | None:
    """'candidate 1 (its own report) / reference 2 aten_ops per forward'."""
    n = r.launches
    if n is None:
        return None
    side = (lambda v: "?" if v is None else str(v))
    return (f"candidate {side(n.candidate)} (its own report) / reference "
            f"{side(n.reference)} {n.unit or ''} per forward").replace("  ", " ")


def cell_summary(records: list[SampleRecord]) -> tuple[float | None, str]:
    """A heat-map cell of one problem's records: the best counted speedup of the last
    turns, else the status that got furthest (correct > incorrect > ... > compile_error)."""
    last = last_turns(records)
    speedups = [s for s in map(counted_speedup, last) if s]
    if speedups:
        return max(speedups), "correct"
    order = ("correct", "incorrect", "runtime_error", "timeout", "oom", "crashed",
             "output_flood", "compile_error")
    statuses = [r.status for r in last]
    for status in order:
        if status in statuses:
            return None, status
    return None, statuses[0] if statuses else "missing"
