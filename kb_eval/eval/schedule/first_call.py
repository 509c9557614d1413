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

Candidates often guard the compile: `if torch.cuda.is_available(): self.op =
load_inline(...)`, false where the GPU is hidden. So while the candidate's code runs here
it is told a GPU is there (`gpu_in_sight`), and torch's build code the truth. A source
whose compile sits under such a condition at import also gets this call.
"""

from __future__ import annotations

import ast
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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


def call_on_meta(payload: dict, workdir: Path) -> dict:
    """Build child target: the candidate's model built and called once on meta inputs
    (payload: source, problem_code, precision, extensions_dir)."""
    import torch

    from kb_eval.eval.child.worker import use_build_dirs
    from kb_eval.inputs import build_model, make_init_inputs, make_inputs, precision_dtype
    from kb_eval.problems import load_module

    use_build_dirs(payload.get("extensions_dir"))
    t0 = time.monotonic()
    try:
        problem = load_module(payload["problem_code"], "kb_problem")
        dtype = precision_dtype(payload["precision"])
        with gpu_in_sight():
            module = load_module(payload["source"], "kb_candidate")
            init = make_init_inputs(problem.get_init_inputs, "meta")
            model = build_model(module.ModelNew, init, 0, "meta", dtype)
            with torch.no_grad():
                model(*make_inputs(problem.get_inputs, 0, "meta", dtype))
        ended = "returned"
    except Exception as e:  # noqa: BLE001 - expected: meta tensors reach custom kernels
        ended = type(e).__name__
    return {"status": "ok", "ended": ended, "seconds": time.monotonic() - t0}


@contextmanager
def gpu_in_sight() -> Iterator[None]:
    """For the block, `torch.cuda.is_available()` is True and `device_count()` at least 1
    (the guards candidates put around their compiles), except inside a cpp_extension
    build: torch's own build code (its arch flags count the devices) sees the truth.
    Nothing else changes: any real use of the device still fails, and that is ignored."""
    import torch

    from kb_eval.eval.child.compiles import around_compiles

    cuda = torch.cuda
    real = cuda.is_available, cuda.device_count
    told = (lambda: True), (lambda: max(1, real[1]()))

    @contextmanager
    def truth() -> Iterator[None]:
        shown = cuda.is_available, cuda.device_count
        cuda.is_available, cuda.device_count = real
        try:
            yield
        finally:
            cuda.is_available, cuda.device_count = shown

    around_compiles(truth)
    cuda.is_available, cuda.device_count = told
    try:
        yield
    finally:
        cuda.is_available, cuda.device_count = real
