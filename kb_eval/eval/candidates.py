"""Finding candidate files for the CLI: `level<L>_problem<ID>_sample<S>.py` files (given
one by one or as folders), or a manifest JSON: a list of {"key" | "level"+"problem_id",
"sample", "path"} (paths relative to the manifest), or {"samples": [that list]}.
What is skipped is said in one warning line each (`skipped_warnings`): files of a folder
not named as candidates, and candidates outside the problems asked (--level, --problems)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.problems import Problem

NAME_RE = re.compile(r"^level(\d+)_problem(\d+)_sample(\d+)\.py$")
KEY_RE = re.compile(r"^(?:(.+)/)?level(\d+)/(\d+)$")


@dataclass
class CandidateFile:
    level: int
    problem_id: int
    sample: int
    path: Path


def find_candidates(args: list[str]) -> list[CandidateFile]:
    found: list[CandidateFile] = []
    for arg in args:
        path = Path(arg).expanduser()
        if path.is_dir():
            files = [f for f in sorted(path.glob("*.py")) if NAME_RE.match(f.name)]
            if not files:
                raise UserError(f"{path} holds no level<L>_problem<ID>_sample<S>.py files")
            found.extend(_from_name(f) for f in files)
        elif path.is_file() and path.suffix == ".json":
            found.extend(_from_manifest(path))
        elif path.is_file():
            if not NAME_RE.match(path.name):
                raise UserError(f"{path}: candidate files are named "
                                f"level<L>_problem<ID>_sample<S>.py")
            found.append(_from_name(path))
        else:
            raise UserError(f"{path} does not exist")
    seen: dict[tuple[int, int, int], Path] = {}
    for c in found:
        slot = (c.level, c.problem_id, c.sample)
        if slot in seen and seen[slot] != c.path:
            raise UserError(f"two candidates for level {c.level} problem {c.problem_id} "
                            f"sample {c.sample}: {seen[slot]} and {c.path}")
        seen[slot] = c.path
    return found


def _from_name(path: Path) -> CandidateFile:
    m = NAME_RE.match(path.name)
    return CandidateFile(int(m.group(1)), int(m.group(2)), int(m.group(3)), path)


def _from_manifest(path: Path) -> list[CandidateFile]:
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    entries = data.get("samples") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise UserError(f"{path}: expected a list of {{key, sample, path}} entries")
    out = []
    for i, e in enumerate(entries):
        try:
            if "key" in e:
                m = KEY_RE.match(str(e["key"]))
                if not m:
                    raise ValueError(f"key {e['key']!r} is not <source>/level<N>/<id>")
                level, pid = int(m.group(2)), int(m.group(3))
            else:
                level, pid = int(e["level"]), int(e["problem_id"])
            file = (path.parent / e["path"]).resolve()
            out.append(CandidateFile(level, pid, int(e.get("sample", 0)), file))
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{path}: entry {i}: {err}") from None
        if not file.is_file():
            raise UserError(f"{path}: entry {i}: {file} does not exist")
    return out


def match_problems(cands: list[CandidateFile], problems: list[Problem],
                   where: str) -> list[tuple[Problem, CandidateFile]]:
    by_id = {(p.level, p.problem_id): p for p in problems}
    missing = sorted({(c.level, c.problem_id) for c in cands} - by_id.keys())
    if missing:
        shown = ", ".join(f"level {lv} problem {i}" for lv, i in missing[:5])
        raise UserError(f"{where} has no {shown}")
    return [(by_id[(c.level, c.problem_id)], c) for c in cands]


def misnamed(args: list[str]) -> list[Path]:
    """The .py files of the folders given that are not named as candidates: skipped."""
    return [f for arg in args if (path := Path(arg).expanduser()).is_dir()
            for f in sorted(path.glob("*.py")) if not NAME_RE.match(f.name)]


def within(pairs: list[tuple[Problem, CandidateFile]], asked: list[Problem]
           ) -> tuple[list[tuple[Problem, CandidateFile]], list[CandidateFile]]:
    """(the pairs whose problem was asked, the candidates of the others)."""
    keys = {p.key for p in asked}
    return ([(p, c) for p, c in pairs if p.key in keys],
            [c for p, c in pairs if p.key not in keys])


def skipped_warnings(misnamed_files: list[Path], outside: list[CandidateFile],
                     selection: str) -> list[str]:
    """One warning line for each kind of file left out, naming the first few."""
    def few(names: list[str]) -> str:
        return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")

    lines = []
    if misnamed_files:
        lines.append(f"warning: skipped {len(misnamed_files)} file(s) not named "
                     f"level<L>_problem<ID>_sample<S>.py: "
                     f"{few([str(f) for f in misnamed_files])}")
    if outside:
        lines.append(f"warning: skipped {len(outside)} candidate(s) outside {selection}: "
                     f"{few([c.path.name for c in outside])}")
    return lines


def save_code(run_dir: Path, problem: Problem, sample: int, source: str) -> str:
    """Copy a candidate's source into the run's code/ folder, named as kb_eval.run names
    an answer's code, so the run keeps what was judged; returns the path relative to the
    run."""
    rel = Path("code") / f"{problem.slug}_sample{sample}_turn0.py"
    (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / rel).write_text(source, encoding="utf-8")
    return rel.as_posix()
