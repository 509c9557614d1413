"""The worked examples shown in one-/few-shot prompts must be correct: each example
ModelNew is built and compared with its reference in every precision.

They compile C++/CUDA extensions (about a minute each), so they are `gpu` tests: they run on
the GPU machine (cpp ones too, on its CPU) and are skipped where there is no CUDA. This
test imports the example code in-process: it is our own code, not a candidate's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from kb_eval.inference.prompts import EXAMPLES, TEMPLATES
from kb_eval.inputs import PRECISIONS, TOLERANCES

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # conftest skips gpu tests without CUDA


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", ["cuda", "triton", "cpp"])
@pytest.mark.parametrize("example", [name for name, _ in EXAMPLES])
def test_example_solution_matches_reference(backend: str, example: str, build_cache_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(build_cache_dir / "inference_examples"))
    device = torch.device("cpu" if backend == "cpp" else "cuda")
    problem = _load(TEMPLATES / "examples" / "problems" / f"{example}.py", f"ex_p_{example}")
    solution = _load(TEMPLATES / "examples" / backend / f"{example}.py",
                     f"ex_s_{backend}_{example}")
    for precision, dtype in PRECISIONS.items():
        torch.manual_seed(0)
        with torch.device(device):
            init = problem.get_init_inputs()
            reference = problem.Model(*init).to(dtype)
            candidate = solution.ModelNew(*init).to(dtype)
            candidate.load_state_dict(reference.state_dict())
            inputs = [x.to(dtype) for x in problem.get_inputs()]
        with torch.no_grad():
            expected, got = reference(*inputs), candidate(*inputs)
        atol, rtol = TOLERANCES[precision]
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol,
                                   msg=lambda m: f"{backend}/{example}/{precision}: {m}")
