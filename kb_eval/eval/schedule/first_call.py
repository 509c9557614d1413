"""Lazy compiles moved into the build pool: one call of the candidate on meta tensors.

Some generated candidates call `load_inline` inside `__init__` or on their first
`forward`, not at import. The build child (import only) then compiles nothing, and the
compile runs in the run child, on the device lane, for about a minute each with the GPU
idle (docs/PERFORMANCE.md, "First-call compiles in the build pool").

So after a build, a source that calls a compiler inside a function gets a second build
child (same sandbox: no GPU visible, niced, off the timing cores, memory-capped) that
builds the model and calls it once on meta-device inputs: shapes without memory, no
kernel runs. The compile it starts lands in the build's extensions folder, where the run
child's `load_inline` finds it up to date. What the call does after that is ignored (a
meta tensor reaching a custom kernel raises, as expected), and so is its outcome: the
run child still builds, checks and times everything as before, so a call that fails or
times out here changes no verdict, only where the compile time is spent.

Candidates often guard the compile: `if torch.cuda.is_available(): self.op =
load_inline(...)`, false where the GPU is hidden. So while the candidate's code runs here
it is told a GPU is there (`gpu_in_sight`), and torch's build code the truth. A source
whose compile sits under such a condition at import also gets this call.

This is the parent's side (which sources, the payload); the child's, where the
candidate runs, is kb_eval/eval/child/first_call_task.py.
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
