"""The trust boundary as the tree shows it (kb_eval/eval/child, judge, wire, schedule), and
the size rules of docs/CONVENTIONS.md (modules of at most 400 lines, functions of at most
60): these rules are what makes the layout mean something, so they are checked, not
assumed."""

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
           if m.startswith(("kb_eval.eval.child.worker", "kb_eval.eval.child.build_task",
                            "kb_eval.eval.child.first_call_task", "kb_eval.eval.schedule.build",
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


# ------------------------------------------------------------------ sizes
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# Today's offenders, by path relative to the repository (modules) or path:qualified name
# (functions). The list may only shrink: an entry that no longer offends fails below.
LONG_MODULES: set[str] = set()
LONG_FUNCTIONS = {
    "kb_eval/eval/schedule/sample.py:_evaluate",
}
ROOT = PACKAGE.parent


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every function and method in a file (decorators apart), by qualified
    name ("Class.method", "outer.inner")."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), "")
    return lengths


def long_modules() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in package_modules()
            if len(p.read_text().splitlines()) > MAX_MODULE_LINES}


def long_functions() -> set[str]:
    return {f"{p.relative_to(ROOT)}:{name}" for p in package_modules()
            for name, n in function_lengths(p).items() if n > MAX_FUNCTION_LINES}


def test_no_module_over_the_limit_but_the_listed():
    new = long_modules() - LONG_MODULES
    assert not new, f"over {MAX_MODULE_LINES} lines (split by job): {sorted(new)}"


def test_no_function_over_the_limit_but_the_listed():
    new = long_functions() - LONG_FUNCTIONS
    assert not new, f"over {MAX_FUNCTION_LINES} lines: {sorted(new)}"


def test_the_lists_of_long_ones_only_shrink():
    """An entry fixed since is taken off, so that it cannot grow back unseen."""
    assert not LONG_MODULES - long_modules(), "no longer too long: drop it from LONG_MODULES"
    assert not LONG_FUNCTIONS - long_functions(), "no longer too long: drop from LONG_FUNCTIONS"


def test_the_size_checks_can_fail(tmp_path):
    """The checker counts a method nested in a class, by its qualified name."""
    f = tmp_path / "m.py"
    body = "\n".join(f"        x = {i}" for i in range(MAX_FUNCTION_LINES))
    f.write_text(f"class C:\n    def long(self):\n{body}\n    def short(self):\n        pass\n")
    lengths = function_lengths(f)
    assert lengths == {"C.long": MAX_FUNCTION_LINES + 1, "C.short": 2}
