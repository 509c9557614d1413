"""`python -m kb_eval.run` with no model on a machine with no key and no network: the
built-in `reference` model answers with the hand-written solutions of the repo's config
(source bert; cpp on CPU, cuda on a GPU). Slow: the true command, no flags, from a fresh
folder: on a CPU it builds every C++ solution and evaluates bert's 8 batch 64 x seq 64
problems (a few minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _problem_file(key: str) -> str:
    """bert/level1/6 -> the bundled file's name, e.g. 6_linear_b64s64.py."""
    suite, level, pid = key.split("/")
    [path] = (REPO / "reference_kernels" / "problems" / suite / level).glob(f"{pid}_*.py")
    return path.name


def test_reference_model_run_without_arguments(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k != "KB_EVAL_CONFIG" and not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # cwd is a fresh folder: the repo's config.py is used, results/ lands in tmp_path.
    done = subprocess.run([sys.executable, "-m", "kb_eval.run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = (tmp_path / "results" / "reference").glob("*/results.json")
    results = json.loads(path.read_text())
    index = json.loads((REPO / "reference_kernels/solutions/cpp/index.json").read_text())
    # On the CPU the default asks bert's batch 64 x seq 64 problems (every level and kernel)
    # and says so; --full-suite asks all 16.
    quick = sorted(k for k in index if "b64s64" in _problem_file(k))
    assert sorted(results["problems_asked"]) == quick and len(quick) == 8
    assert {k.split("/")[1] for k in quick} == {"level1", "level2", "level3"}
    assert "--full-suite asks all of them" in done.stdout
    assert results["name"] == "reference" and results["model"]["name"] == "reference"
    samples = results["samples"]
    assert sorted(s["key"] for s in samples) == sorted(results["problems_asked"])
    for s in samples:
        assert s["status"] == "correct", (s["key"], s["error"], s["detail"])
        assert s["speedup"] and s["timing"]["n"] >= 1
        assert (path.parent / s["code_path"]).is_file()
        assert s["prompt_tokens"] == 0 and s["cost"] == 0.0
    summary = results["summary"]
    assert summary["correct_rate"] == 1.0 and summary["compiled_rate"] == 1.0
    assert results["usage"]["cost_usd"] == 0.0
    assert "fast_1" in done.stdout and "pass@1" in done.stdout
