"""The hand-written CPU (C++) solutions in reference_kernels/solutions/cpp against their bert
reference problems, on CPU: same seed for Model and ModelNew, the reference's weights copied
into the candidate (LayerNorm affine parameters made non-trivial first, so gamma/beta are
really checked), fresh random inputs, torch.allclose at 1e-4 (fp32) / 2e-2 (bf16).

Fast enough for CI: every b64s64 problem at fp32, one b16s512 problem at fp32 and one fused
problem at bf16. Each distinct solution file compiles once per session (one shared
TORCH_EXTENSIONS_DIR), the needed ones in parallel child processes before the first test.
Independent of kb_eval: files are imported with importlib from their paths."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn as nn

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "reference_kernels" / "solutions" / "cpp"
PROBLEMS = REPO / "reference_kernels" / "problems"
INDEX: dict[str, str] = json.loads((SOLUTIONS / "index.json").read_text())
SEED = 1234
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def problem_path(key: str) -> Path:
    suite, level, pid = key.split("/")
    matches = sorted((PROBLEMS / suite / level).glob(f"{pid}_*.py"))
    assert len(matches) == 1, f"{key}: expected one problem file, found {matches}"
    return matches[0]


def _cases() -> list:
    cases = [pytest.param(key, torch.float32, id=f"{key}-fp32")
             for key in INDEX if "b64s64" in problem_path(key).name]
    cases.append(pytest.param("bert/level2/1", torch.float32, id="bert/level2/1-fp32-b16s512"))
    cases.append(pytest.param("bert/level2/4", torch.bfloat16, id="bert/level2/4-bf16"))
    return cases


def import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_solutions: dict[str, object] = {}


def load_solution(name: str):
    """One import (one extension build/load) per solution file per session."""
    if name not in _solutions:
        _solutions[name] = import_file(SOLUTIONS / name, f"kb_cpp_solution_{Path(name).stem}")
    return _solutions[name]


def _build_in_child(name: str, env: dict) -> None:
    # A failure is reported by the in-process import in the test, with the compiler's output.
    try:
        subprocess.run([sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1])",
                        str(SOLUTIONS / name)], env=env, capture_output=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        pass


def _selected_solution_files(session) -> list[str]:
    """The solution files that this session's selected tests of this module will load."""
    here = Path(__file__).resolve()
    return sorted({INDEX[item.callspec.params["key"]] for item in session.items
                   if Path(str(item.path)).resolve() == here and hasattr(item, "callspec")
                   and "key" in item.callspec.params})


@pytest.fixture(scope="session")
def torch_extensions_dir(request, build_cache_dir):
    """One TORCH_EXTENSIONS_DIR for the session; the solutions the selected tests need are
    compiled first, side by side (one compiler process each, one per core)."""
    path = build_cache_dir / "cpp-solutions"
    path.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    needed = _selected_solution_files(request.session)
    with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 4))) as pool:
        list(pool.map(lambda name: _build_in_child(name, dict(os.environ)), needed))
    yield path
    if previous is None:
        os.environ.pop("TORCH_EXTENSIONS_DIR", None)
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = previous


def test_index_covers_every_bert_problem():
    keys = {f"bert/{p.parent.name}/{p.name.split('_')[0]}" for p in PROBLEMS.glob("bert/level*/*.py")}
    assert set(INDEX) == keys
    for key, name in INDEX.items():
        assert (SOLUTIONS / name).is_file(), f"{key}: {name} missing"


def test_solution_sources_are_self_contained():
    names = set()
    for path in sorted(SOLUTIONS.glob("*.py")):
        source = path.read_text()
        assert "class ModelNew(" in source and "load_inline(" in source, path.name
        assert "cuda_sources" not in source and "build_directory" not in source, path.name
        name = source.split('load_inline(name="', 1)[1].split('"', 1)[0]
        assert name.startswith("kb_cpp_") and name not in names, f"{path.name}: extension name {name}"
        names.add(name)


def _perturb_layernorms(model: nn.Module) -> None:
    """nn.LayerNorm starts at weight 1, bias 0: a solution ignoring them would pass."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.normal_(1.0, 0.2)
                module.bias.normal_(0.0, 0.2)


@pytest.mark.slow
@pytest.mark.parametrize("key,dtype", _cases())
def test_solution_matches_reference(key, dtype, torch_extensions_dir):
    problem = import_file(problem_path(key), f"kb_problem_{key.replace('/', '_')}")
    solution = load_solution(INDEX[key])
    init = problem.get_init_inputs()
    torch.manual_seed(SEED)
    reference = problem.Model(*init)
    _perturb_layernorms(reference)
    torch.manual_seed(SEED)
    candidate = solution.ModelNew(*init)
    ref_state, own_state = reference.state_dict(), candidate.state_dict()
    assert own_state.keys() == ref_state.keys(), "ModelNew must hold the reference's parameters"
    assert all(own_state[k].shape == ref_state[k].shape for k in own_state)
    candidate.load_state_dict(ref_state)
    reference, candidate = reference.to(dtype).eval(), candidate.to(dtype).eval()

    torch.manual_seed(SEED + 1)
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in problem.get_inputs()]
    with torch.no_grad():
        expected = reference(*inputs)
        got = candidate(*[t.clone() for t in inputs])
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = TOLERANCE[dtype]
    worst = (got.float() - expected.float()).abs().max().item()
    assert torch.allclose(got, expected, atol=tol, rtol=tol), f"max |diff| {worst:.3g} (tol {tol})"
