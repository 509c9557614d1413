"""python -m kb_eval.check on a temporary KernelBench-layout folder: problems whose
reference output is constant, input-independent, within tolerance of constant, zero or NaN
are flagged (exit 1); problems whose output follows their inputs are not (exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''
RANDN = "torch.randn(32, 16)"
PROBLEMS = {
    "1_Scale": ("x * 2.0", RANDN),
    "2_SoftmaxOfOne": ("torch.softmax(x, dim=1)", "torch.randn(32, 1)"),
    "3_Zero": ("x - x", RANDN),
    "4_Tiny": ("x * 1e-7", RANDN),
    "5_Nan": ("x * float('nan')", RANDN),
    "6_FixedInputs": ("x.relu()", "torch.ones(32, 16)"),
    "7_MeanBlind": ("x.mean(dim=0, keepdim=True) * 1e-5", RANDN),
    "8_Tuple": ("(x + 1, x.sum() * 0)", RANDN),
}
EXPECTED = {
    "1_Scale": [],
    "2_SoftmaxOfOne": ["constant", "input_independent"],
    "3_Zero": ["constant", "input_independent", "all_zero"],
    "4_Tiny": ["tolerance_blind", "zeros_pass"],
    "5_Nan": ["nonfinite"],
    "6_FixedInputs": ["input_independent"],
    "7_MeanBlind": ["tolerance_blind", "zeros_pass"],
    "8_Tuple": ["out1:input_independent", "out1:all_zero"],
}


def write_problems(root: Path, names) -> Path:
    level = root / "level1"
    level.mkdir(parents=True)
    for name in names:
        body, inputs = PROBLEMS[name]
        (level / f"{name}.py").write_text(TEMPLATE.format(body=body, inputs=inputs))
    return root


def check(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "kb_eval.check", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def row_of(stdout: str, name: str) -> str:
    short = name.split("_", 1)[1]
    return next(ln for ln in stdout.splitlines() if f" {short} " in f" {ln} ")


def test_degenerate_problems_flagged(tmp_path):
    src = write_problems(tmp_path / "probs", PROBLEMS)
    proc = check("--source", str(src), "--seeds", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name, flags in EXPECTED.items():
        row = row_of(proc.stdout, name)
        if not flags:
            assert row.rstrip().endswith("ok"), row
        for flag in flags:
            assert flag in row, (name, flag, row)
    assert "7 of 8 problem(s) flagged" in proc.stdout


def test_healthy_problems_pass():
    """The exploit suite's problems whose outputs follow their inputs (3_ConstantSoftmax,
    degenerate on purpose, is left out; the eval flags it, see verdicts.json)."""
    proc = check("--source", str(REPO / "tests" / "adversarial" / "problems"),
                 "--problems", "1,2,4", "--seeds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all 3 problem(s) ok" in proc.stdout


def test_bad_seeds_is_a_user_error(tmp_path):
    proc = check("--source", str(tmp_path), "--seeds", "1")
    assert proc.returncode == 2 and proc.stderr.startswith("error:")
