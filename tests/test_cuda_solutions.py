"""Every hand-written CUDA solution (reference_kernels/solutions/cuda: the indexed files and
their `__variant` files) against its reference problem: 5 trials, each with fresh random
inputs, at fp32 (atol = rtol = 1e-4, TF32 off in the reference), bf16 (2e-2) and fp16 (1e-2), the
evaluator's rule |out - ref| <= atol + rtol |ref|, no NaN/Inf, every element written."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
import torch

from kb_eval.inputs import (TOLERANCES, build_model, make_init_inputs, make_inputs, precision_dtype,
                            set_precision_flags)
from kb_eval.problems import load_folder, load_module, load_problems
from kb_eval.solutions import files_of

pytestmark = pytest.mark.gpu

SOLUTIONS = Path(__file__).resolve().parents[1] / "reference_kernels" / "solutions" / "cuda"
INDEX = json.loads((SOLUTIONS / "index.json").read_text())
TRIALS = 5
SEED = 7


def solution_files(entry: str | dict) -> list[str]:
    """The file(s) an index entry names and every `<stem>__variant.py` beside them."""
    stem = files_of(entry)[0].removesuffix(".py").split("__")[0]
    return sorted({*files_of(entry), f"{stem}.py",
                   *(p.name for p in SOLUTIONS.glob(f"{stem}__*.py"))})


CASES = [(key, name) for key, primary in INDEX.items() for name in solution_files(primary)]
_modules: dict[str, object] = {}


def _module(name: str, code: str):
    if name not in _modules:  # one exec (and one extension load) per file per process
        _modules[name] = load_module(code, name)
    return _modules[name]


@functools.lru_cache(maxsize=1)
def _problems() -> dict:
    suites = {key.split("/")[0] for key in INDEX}
    root = os.environ.get("KB_PROBLEMS_DIR")  # a KernelBench-layout copy of the suite, if set
    return {p.key: p for s in suites
            for p in (load_folder(Path(root) / s, s) if root else load_problems(s))}


def test_index_names_existing_files():
    for key, entry in INDEX.items():
        for name in files_of(entry):
            assert (SOLUTIONS / name).is_file(), f"{key}: {name} missing"


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("key,name", CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_solution_matches_reference(key, name, precision):
    problem = _problems().get(key)
    assert problem is not None, f"{key} is not a bundled problem"
    prob = _module(f"kb_prob_{key.replace('/', '_')}", problem.code)
    sol = _module(f"kb_sol_{name.removesuffix('.py')}", (SOLUTIONS / name).read_text())
    dev, dtype = torch.device("cuda"), precision_dtype(precision)
    set_precision_flags(precision)
    atol, rtol = TOLERANCES[precision]
    init = make_init_inputs(prob.get_init_inputs, dev)
    ref = build_model(prob.Model, init, SEED, dev, dtype)
    new = build_model(sol.ModelNew, init, SEED, dev, dtype, reference_state=ref.state_dict())
    with torch.no_grad():
        for trial in range(TRIALS):
            inputs = make_inputs(prob.get_inputs, SEED + 1000 * trial + 1, dev, dtype)
            expected = ref(*inputs)
            torch.cuda.synchronize()
            # A NaN-poisoned pool block: an output element the kernel never wrote shows up.
            junk = torch.full_like(expected, float("nan"))
            del junk
            got = new(*inputs)
            torch.cuda.synchronize()
            assert got.shape == expected.shape and got.dtype == expected.dtype
            g, e = got.double(), expected.double()
            assert torch.isfinite(g).all(), f"trial {trial}: non-finite output"
            bad = (g - e).abs() > atol + rtol * e.abs()
            assert not bad.any(), (f"trial {trial}: {int(bad.sum())} of {bad.numel()} elements off, "
                                   f"max |err| {float((g - e).abs().max()):.3e}")
