"""Lazy compiles moved into the build pool: one call of the candidate on meta tensors.

Some generated candidates call `load_inline` inside `__init__` or on their first
`forward`, not at import. The build child (import only) then compiles nothing, and the
compile runs in the run child, on the device lane: on the H100, such candidates of the
throughput corpus held the lane 63-65 s each in `child_correctness`, the GPU idle.

So after a build, a source that calls a compiler inside a function gets a second build
child (same sandbox: no GPU visible, niced, off the timing cores, memory-capped) that
builds the model and calls it once on meta-device inputs: shapes without memory, no
kernel runs. The compile it starts lands in the build's extensions folder, where the run
child's `load_inline` finds it up to date. What the call does after that is ignored (a
meta tensor reaching a custom kernel raises, as expected), and so is its outcome: the
run child still builds, checks and times everything as before, so a call that fails or
times out here changes no verdict, only where the compile time is spent.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

# Calls that start a compile when they run: torch.utils.cpp_extension's load_inline and load.
COMPILERS = {"load_inline", "load"}


def compiles_lazily(source: str) -> bool:
    """Does the source call a compiler inside a function (not only at import)?"""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and _name(node.func) in COMPILERS:
                    return True
    return False


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)


def first_call_payload(ctx, task) -> dict:
    """What Builder.build needs to run the call for a sample (EvalContext, SampleTask)."""
    return {"problem_code": task.problem.code, "precision": ctx.config.precision}


def call_on_meta(payload: dict, workdir: Path) -> dict:
    """Build child target: the candidate's model built and called once on meta inputs
    (payload: source, problem_code, precision, extensions_dir)."""
    import torch

    from kb_eval.eval.child.worker import use_build_dirs
    from kb_eval.inputs import build_model, make_init_inputs, make_inputs, precision_dtype
    from kb_eval.problems import load_module

    use_build_dirs(payload)
    t0 = time.monotonic()
    try:
        problem = load_module(payload["problem_code"], "kb_problem")
        module = load_module(payload["source"], "kb_candidate")
        dtype = precision_dtype(payload["precision"])
        init = make_init_inputs(problem.get_init_inputs, "meta")
        model = build_model(module.ModelNew, init, 0, "meta", dtype)
        with torch.no_grad():
            model(*make_inputs(problem.get_inputs, 0, "meta", dtype))
        ended = "returned"
    except Exception as e:  # noqa: BLE001 - expected: meta tensors reach custom kernels
        ended = type(e).__name__
    return {"status": "ok", "ended": ended, "seconds": time.monotonic() - t0}
