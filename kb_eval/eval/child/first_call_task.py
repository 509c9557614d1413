"""The lazy-compile child's side (schedule/first_call.py): the candidate's model built and
called once on meta inputs, so a compile it starts lands in the build cache."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kb_eval.eval.child.baton import use_build_dirs


def call_on_meta(payload: dict, workdir: Path) -> dict:
    """Build child target (payload: source, problem_code, precision, extensions_dir)."""
    import torch

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
    """For the block, CUDA looks available (candidates guard their compiles so), except
    inside a cpp_extension build, whose arch flags need the truth."""
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
