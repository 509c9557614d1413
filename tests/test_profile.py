"""python -m kb_eval.profile on CPU: two bundled problems, the BERT encoder layer at two
configurations, and a reference beside its C++ solution (--compare); profile.json's
categories add up to 100 %, trace.json is JSON, mistakes are one line and exit 2. One
forward is recorded (the config's DEFAULTS profile_cpu_steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb_eval.cli import run_cli
from kb_eval.profile.__main__ import main
from kb_eval.profile.categories import CATEGORIES

pytestmark = pytest.mark.usefixtures("profile_one_step")

REPO = Path(__file__).resolve().parents[1]
CPP_GELU = REPO / "reference_kernels" / "solutions" / "cpp" / "gelu.py"


def profile(*args: str) -> int:
    return run_cli(main, ["--quiet", "--device", "cpu", *args])


def check_profile(folder: Path) -> dict:
    doc = json.loads((folder / "profile.json").read_text())
    assert set(doc["category_share_pct"]) == set(CATEGORIES)
    assert sum(doc["category_share_pct"].values()) == pytest.approx(100, abs=0.1)
    assert sum(doc["categories"].values()) == pytest.approx(doc["total_ms"], rel=1e-6)
    assert doc["kernel_launches"] == 0 and doc["time_kind"] == "cpu"  # no GPU here
    assert isinstance(json.loads((folder / "trace.json").read_text()), (dict, list))
    assert "## Time by category" in (folder / "report.md").read_text()
    return doc


def test_two_problems(tmp_path):
    assert profile("--source", "ops", "--level", "1", "--problems", "15,19",
                   "--out", str(tmp_path)) == 0
    relu = check_profile(tmp_path / "level1_problem15_relu_fp32")
    fused = check_profile(tmp_path / "level1_problem19_add_mul_fused_fp32")
    # aten::relu runs as clamp_min on a CPU: still activation time, not elementwise
    assert relu["category_share_pct"]["activation"] > 50
    # and its operators table says so too: both tables of report.md name one category
    assert {o["category"] for o in relu["ops"] if o["self_ms"] > 0} == {"activation"}, \
        [(o["op"], o["category"]) for o in relu["ops"]]
    assert fused["category_share_pct"]["elementwise"] > 50
    assert {o["op"] for o in fused["top_ops"]} >= {"aten::add", "aten::mul"}


def test_bert_encoder_layer_two_configs(tmp_path):
    assert profile("--bert", "--bert-model", "layer", "--batch-sizes", "1", "--seq-lens",
                   "16", "32", "--out", str(tmp_path)) == 0
    for seq in (16, 32):
        doc = check_profile(tmp_path / f"bert-layer_b1_s{seq}_fp32")
        assert doc["category_share_pct"]["matmul"] > 10
        assert doc["category_share_pct"]["normalization"] > 0
        assert doc["aten_calls"] > 20
        addmm = next(o for o in doc["ops"] if o["op"] == "aten::addmm")
        assert addmm["calls"] == 6 and addmm["category"] == "matmul"  # q, k, v, out, ffn x2


def test_compare_reference_with_cpp_solution(tmp_path):
    assert profile("--source", "bert", "--level", "1", "--problems", "9", "--solution",
                   str(CPP_GELU), "--compare", "--out", str(tmp_path)) == 0
    label = "level1_problem9_gelu_b64s64_fp32"
    ref = check_profile(tmp_path / label)
    cand = check_profile(tmp_path / f"{label}_candidate")
    assert ref["category_share_pct"]["activation"] > 80
    # the extension's kernel is no aten operator: its time is the candidate's own code
    assert cand["category_share_pct"]["activation"] == 0
    assert cand["category_share_pct"]["other"] > 50
    cmp = json.loads((tmp_path / f"{label}_compare" / "compare.json").read_text())
    assert [r["category"] for r in cmp["categories"]] == CATEGORIES
    assert cmp["reference"]["total_ms"] == pytest.approx(ref["total_ms"])
    assert cmp["candidate"]["aten_calls"] == cand["aten_calls"]
    assert "candidate ms" in (tmp_path / f"{label}_compare" / "compare.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--compare"], "--compare needs --solution"),
    (["--solution", "/nonexistent/x.py"], "no such file"),
    (["--bert", "--batch-sizes", "0"], "--batch-sizes must all be at least 1"),
    (["--bert", "--solution", str(CPP_GELU)], "takes no --solution"),
    (["--source", "ops", "--solution", str(CPP_GELU)], "against one problem"),
])
def test_mistakes_are_one_line(tmp_path, capsys, args, message):
    assert profile(*args, "--out", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--steps", "--warmup", "--cache-dir"])
def test_settings_of_the_config_are_no_flags(capsys, flag):
    """Forwards recorded, before them, and the build cache are the config's DEFAULTS."""
    with pytest.raises(SystemExit) as stop:
        profile(flag, "1")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"unrecognized arguments: {flag} 1" in err


def test_out_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("")
    assert profile("--bert", "--out", str(blocker / "x")) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
