"""Our hand-written reference solutions: reference_kernels/solutions/<backend>/index.json
maps a problem key to its file, one for every precision (`"bert/level1/3": "layernorm.py"`)
or one per precision (`"bert/level2/1": {"fp32": "a.py", "bf16": "b.py"}`)."""

from __future__ import annotations

import json
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.problems import REPO_ROOT

SOLUTIONS_ROOT = REPO_ROOT / "reference_kernels" / "solutions"


def load_index(backend: str, root: Path | str = SOLUTIONS_ROOT) -> dict[str, str | dict[str, str]]:
    path = Path(root) / backend / "index.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no {backend!r} reference solutions ({path} is missing)") from None


def pick(entry: str | dict[str, str] | None, precision: str) -> str | None:
    """The file of an index entry for a precision (a dict may give a "default")."""
    if isinstance(entry, dict):
        return entry.get(precision) or entry.get("default")
    return entry


def files_of(entry: str | dict[str, str]) -> list[str]:
    """Every file an index entry names, fp32's first."""
    if isinstance(entry, dict):
        return list(dict.fromkeys(entry.values()))
    return [entry]
