"""python -m kb_eval.baseline end to end on CPU: three small problems, one of which kills
its process; the run records it and goes on; --resume times nothing twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBLEMS = {
    "1_scale.py": "return x * 2.0",
    "2_segfault.py": "import ctypes; ctypes.string_at(0); return x",
    "3_softmax.py": "return torch.softmax(x, dim=-1)",
}
TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


def run_baseline(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--quiet", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def test_baseline_records_crash_continues_and_resumes(tmp_path):
    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    for name, body in PROBLEMS.items():
        (level / name).write_text(TEMPLATE.format(body=body))
    args = ["--source", str(tmp_path / "probs"), "--results-dir", str(tmp_path / "res"),
            "--warmup", "1", "--trials", "5"]
    r = run_baseline(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "res" / "baseline" / "cpu" / "local-probs" / "fp32.json"
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1 and data["precision"] == "fp32"
    assert data["hardware"]["slug"] == "cpu" and data["timing"]["trials"] == 5
    recs = data["records"]
    assert set(recs) == {"local-probs/level1/1", "local-probs/level1/2", "local-probs/level1/3"}
    assert recs["local-probs/level1/2"]["status"] == "crashed"
    assert "SIGSEGV" in recs["local-probs/level1/2"]["error"]
    for key in ("local-probs/level1/1", "local-probs/level1/3"):
        t = recs[key]["timing"]
        assert recs[key]["status"] == "ok" and t["n"] == 5 and 0 < t["min"] <= t["median"] <= t["max"]
        assert recs[key]["core"] is None and recs[key]["gpu"] is None  # pinned on a GPU only

    # --resume: nothing new to time, the file is unchanged.
    before = out.read_text()
    r = run_baseline(*args, "--resume", cwd=tmp_path)
    assert r.returncode == 0 and "3 problem(s) already in" in r.stdout
    assert json.loads(out.read_text())["records"] == json.loads(before)["records"]

    # --resume --retry-failed times only the failed one again.
    r = run_baseline(*args, "--resume", "--retry-failed", cwd=tmp_path)
    assert "2 problem(s) already in" in r.stdout and "1 to time" in r.stdout

    # Other settings on the same file: refused with one line, exit 2.
    r = run_baseline(*args[:-1], "7", cwd=tmp_path)
    assert r.returncode == 2 and "different timing settings" in r.stderr
