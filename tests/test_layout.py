"""The trust boundary as the tree shows it (kb_eval/eval/child, judge, wire, schedule):
these rules are what makes the layout mean something, so they are checked, not assumed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EVAL = Path(__file__).resolve().parents[1] / "kb_eval" / "eval"
PACKAGE = EVAL.parents[0]


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions (relative imports
    resolved)."""
    names: set[str] = set()
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(parts[:-node.level] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def modules(side: str) -> list[Path]:
    return sorted((EVAL / side).glob("*.py"))


@pytest.mark.parametrize("path", modules("child"), ids=lambda p: p.name)
def test_child_side_imports_no_judge_and_no_scheduler(path):
    bad = {m for m in imports_of(path)
           if m.startswith(("kb_eval.eval.judge", "kb_eval.eval.schedule"))}
    assert not bad, f"{path.name} runs in a candidate's process and imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules("judge") + modules("wire"), ids=lambda p: p.name)
def test_judge_never_imports_candidate_code(path):
    text = path.read_text()
    bad = {m for m in imports_of(path)  # the modules that bring candidate code in
           if m.startswith(("kb_eval.eval.child.worker", "kb_eval.eval.schedule.build",
                            "kb_eval.eval.schedule.pool", "kb_eval.eval.schedule.sample"))}
    assert not bad, f"{path.name} is trusted and imports {sorted(bad)}"
    assert "kb_candidate" not in text, f"{path.name} names the candidate's module"


def test_wire_formats_import_neither_side():
    for path in modules("wire"):
        bad = {m for m in imports_of(path) if m.startswith("kb_eval.eval.")
               and not m.startswith("kb_eval.eval.wire")}  # one format may use another
        assert not bad, f"{path.name} is a shared format and imports {sorted(bad)}"


def test_the_rule_can_fail(tmp_path):
    """The checker sees an import hidden inside a function."""
    f = PACKAGE / "eval" / "child" / "_probe_for_test.py"
    f.write_text("def f():\n    from kb_eval.eval.judge import guards\n")
    try:
        assert "kb_eval.eval.judge.guards" in imports_of(f)
    finally:
        f.unlink()


def test_every_side_is_populated():
    for side in ("child", "judge", "wire", "schedule"):
        assert len(modules(side)) >= 3, side
