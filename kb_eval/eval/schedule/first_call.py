"""Lazy compiles moved into the build pool: one call of the candidate on meta tensors.

A candidate that compiles inside `__init__` or `forward` would do so on the device lane
with the GPU idle; such a source gets a second build child, in the same sandbox, that
calls the model once on meta inputs so the compile lands in the build's folder. Its
outcome changes no verdict. The child's side is child/first_call_task.py.
"""

from __future__ import annotations

import ast

# Calls that start a compile when they run: torch.utils.cpp_extension's load_inline and load.
COMPILERS = {"load_inline", "load"}


def compiles_lazily(source: str) -> bool:
    """Does the source call a compiler inside a function, or under a condition at import
    (which the build child, with no GPU in sight, may have skipped)?"""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    lazy = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.If, ast.IfExp)
    return any(isinstance(node, ast.Call) and _name(node.func) in COMPILERS
               for part in ast.walk(tree) if isinstance(part, lazy)
               for node in ast.walk(part))


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)


def first_call_payload(ctx, task) -> dict:
    """What Builder.build needs to run the call for a sample (EvalContext, SampleTask)."""
    return {"problem_code": task.problem.code, "precision": ctx.config.precision}
