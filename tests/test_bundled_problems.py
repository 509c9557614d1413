"""Every bundled problem (reference_kernels/problems/<suite>/level<N>/<id>_<name>.py) is a
well-formed KernelBench problem: it imports on its own, defines Model / get_inputs /
get_init_inputs, creates inputs without a device, fits the size budget (checked on the
`meta` device, so nothing is allocated), and the small ones run a real CPU forward.
Independent of kb_eval: files are imported with importlib from their paths."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

PROBLEMS = Path(__file__).resolve().parents[1] / "reference_kernels" / "problems"
FILES = sorted(PROBLEMS.glob("*/level*/*.py"))
NAME_RE = re.compile(r"^(\d+)_([a-z0-9]+(?:_[a-z0-9]+)*)\.py$")
BUDGET_BYTES = 600 * 2**20  # inputs + output in fp32, per problem
# Cheap enough for a real forward on 2 CPU cores (the b64s64 bert problems are added below).
SMALL_OPS = {"6_sum_dim.py", "9_argmax_dim.py", "15_relu.py", "24_cumsum.py", "25_transpose_copy.py"}

BERT_FILES = {
    "level1": ["1_linear_b16s512", "2_linear_ffn_out_b16s512", "3_layernorm_b16s512", "4_gelu_b16s512",
               "5_softmax_attention_b16s512", "6_linear_b64s64", "7_linear_ffn_out_b64s64",
               "8_layernorm_b64s64", "9_gelu_b64s64", "10_softmax_attention_b64s64"],
    "level2": ["1_attention_output_b16s512", "2_ffn_output_gelu_b16s512", "3_attention_output_b64s64",
               "4_ffn_output_gelu_b64s64"],
    "level3": ["1_encoder_layer_b16s512", "2_encoder_layer_b64s64"],
}


def problem_id(path: Path) -> str:
    return f"{path.parts[-3]}/{path.parts[-2]}/{path.stem}"


def load(path: Path):
    name = f"kb_problem_{path.parts[-3]}_{path.parts[-2]}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def output_tensors(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def test_suites_present():
    suites = {p.name for p in PROBLEMS.iterdir() if p.is_dir()}
    assert {"ops", "bert"} <= suites
    ops = {p.name for p in (PROBLEMS / "ops").glob("level1/*.py")}
    assert len(ops) >= 22
    assert SMALL_OPS <= ops


def test_bert_suite_is_exactly_the_listed_files():
    for level, names in BERT_FILES.items():
        have = sorted(p.stem for p in (PROBLEMS / "bert" / level).glob("*.py"))
        assert have == sorted(names), level


LEVEL_DIRS = sorted({p.parent for p in FILES})


@pytest.mark.parametrize("level_dir", LEVEL_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ids_are_unique_and_contiguous(level_dir: Path):
    ids = sorted(int(NAME_RE.match(p.name).group(1)) for p in level_dir.glob("*.py"))
    assert ids == list(range(1, len(ids) + 1))


@pytest.mark.parametrize("path", FILES, ids=problem_id)
def test_problem_is_well_formed(path: Path):
    assert NAME_RE.match(path.name), f"{path.name}: want <id>_<lowercase_with_underscores>.py"
    source = path.read_text()
    assert "device=" not in source and ".cuda(" not in source, "inputs must not name a device"
    module = load(path)
    assert module.__doc__ and module.__doc__.strip(), "one docstring line: the op and its sizes"
    assert isinstance(module.Model, type) and issubclass(module.Model, nn.Module)
    assert callable(module.get_inputs) and callable(module.get_init_inputs)
    assert isinstance(module.get_init_inputs(), list)


@pytest.mark.parametrize("path", FILES, ids=problem_id)
def test_problem_fits_size_budget(path: Path):
    """Shapes only: the model and inputs live on `meta`, the forward computes no data."""
    module = load(path)
    with torch.device("meta"):
        inputs = module.get_inputs()
        model = module.Model(*module.get_init_inputs()).eval()
        outputs = output_tensors(model(*inputs))
    assert inputs and all(isinstance(t, torch.Tensor) for t in inputs)
    assert all(t.dtype == torch.float32 for t in inputs if t.is_floating_point())
    total = sum(t.numel() * t.element_size() for t in [*inputs, *outputs])
    assert total <= BUDGET_BYTES, f"{total / 2**20:.0f} MB > {BUDGET_BYTES / 2**20:.0f} MB"
    if path.parts[-3] == "ops":  # realistic sizes: tens of MB at least
        assert total >= 32 * 2**20, f"only {total / 2**20:.0f} MB"


SMALL = [p for p in FILES if "b64s64" in p.name or (p.parts[-3] == "ops" and p.name in SMALL_OPS)]


@pytest.mark.parametrize("path", SMALL, ids=problem_id)
def test_small_problem_runs_forward(path: Path):
    module = load(path)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    inputs = module.get_inputs()
    with torch.no_grad():
        outputs = output_tensors(model(*inputs))
    assert outputs
    for out in outputs:
        assert out.numel() > 0
        if out.is_floating_point():
            assert torch.isfinite(out).all()
