"""The sandbox is never weakened silently: where it cannot start, run, eval and check
refuse in one line (exit 2) before any work, unless --no-sandbox was given; with
--no-sandbox they warn in one line and every record says sandbox: false."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from candidates.eval_kit import tuned_config
from kb_eval.isolation import sandbox, sandbox_probe

REPO = Path(__file__).resolve().parents[1]
PROBLEMS = REPO / "tests" / "candidates" / "problems"


def _cli(module: str, args: list[str], tmp_path: Path, env: dict | None = None):
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=600)


def _armed(tmp_path: Path) -> dict:
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "sandbox_start").write_text("always")
    return {"KB_EVAL_FAULTS": str(faults)}


def test_a_host_where_it_works_probes_clean(tmp_path):
    assert sandbox_probe.probe(sandbox.Policy(write=[str(tmp_path)])) is None


@pytest.mark.parametrize("command", [
    ["kb_eval.eval", "--candidates",
     str(REPO / "tests" / "candidates" / "cpp" / "level1_problem1_sample0.py"),
     "--source", str(PROBLEMS), "--backend", "cpp", "--problems", "1"],
    ["kb_eval.run", "--source", "ops", "--problems", "15", "--backend", "cpp"],
    ["kb_eval.check", "--harness", "--source", str(PROBLEMS), "--problems", "1",
     "--backend", "cpp"],
])
def test_a_sandbox_that_cannot_start_is_a_one_line_refusal(tmp_path, command):
    proc = _cli(command[0], [*command[1:], "--results-dir", str(tmp_path / "r")], tmp_path,
                {**_armed(tmp_path), **tuned_config(tmp_path / "config",
                                                    cache_dir=tmp_path / "c")})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "sandbox cannot start" in lines[0], lines
    assert "--no-sandbox" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("results.json"))


@pytest.mark.slow
def test_no_sandbox_warns_once_and_records_say_so(tmp_path):
    candidate = tmp_path / "level1_problem1_sample0.py"
    candidate.write_text("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                         "    def forward(self, x, y):\n        return 2 * x + y\n")
    # armed: with --no-sandbox it is never entered
    proc = _cli("kb_eval.eval", ["--candidates", str(candidate), "--source", str(PROBLEMS),
                                 "--backend", "cpp", "--live-baseline", "--no-sandbox",
                                 "--trials", "5", "--name", "m", "--run", "r1",
                                 "--results-dir", str(tmp_path / "r")],
                tmp_path, {**_armed(tmp_path), **tuned_config(tmp_path / "config",
                                                              cache_dir=tmp_path / "c")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if "--no-sandbox" in line]
    assert len(warnings) == 1 and "warning" in warnings[0]
    [record] = json.loads((tmp_path / "r" / "m" / "r1" / "results.json").read_text())["samples"]
    assert record["sandbox"] is False and record["status"] == "correct", record
