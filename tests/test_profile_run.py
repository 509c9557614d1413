"""python -m kb_eval.profile --model NAME --run RUN: the candidate a run saved for a
problem (its best correct answer, or --sample N) is profiled beside the reference; an
unknown model, run or problem is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kb_eval.cli import run_cli
from kb_eval.profile.__main__ import main
from kb_eval.results import SampleRecord

pytestmark = pytest.mark.usefixtures("profile_one_step")

REPO = Path(__file__).resolve().parents[1]
CPP_GELU = REPO / "reference_kernels" / "solutions" / "cpp" / "gelu.py"
KEY = "bert/level1/9"
LABEL = "level1_problem9_gelu_b64s64_fp32"


def _record(sample: int, correct: bool, speedup: float | None, code: str) -> dict:
    rec = SampleRecord(key=KEY, sample=sample, source="bert", level=1, problem_id=9,
                       name="gelu_b64s64", backend="cpp", precision="fp32",
                       status="correct" if correct else "incorrect", correct=correct,
                       speedup=speedup)
    return {**rec.model_dump(mode="json"), "model": "Test Model", "code_path": code}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A run folder laid out as kb_eval.run writes it: <model slug>/<run>/results.json
    and the answers' code under code/."""
    run_dir = tmp_path / "results" / "test-model" / "run1"
    (run_dir / "code").mkdir(parents=True)
    shutil.copy(CPP_GELU, run_dir / "code" / "level1_problem9_sample1_turn0.py")
    (run_dir / "code" / "level1_problem9_sample0_turn0.py").write_text("# wrong answer\n")
    samples = [_record(0, False, None, "code/level1_problem9_sample0_turn0.py"),
               _record(1, True, 1.4, "code/level1_problem9_sample1_turn0.py")]
    (run_dir / "results.json").write_text(json.dumps({"samples": samples}))
    return tmp_path / "results"


def profile(results: Path, out: Path, *args: str) -> int:
    return run_cli(main, ["--quiet", "--device", "cpu", "--source", "bert",
                          "--level", "1", "--problems", "9", "--results-dir", str(results),
                          "--out", str(out), *args])


def test_best_correct_answer_beside_reference(results, tmp_path, capsys):
    assert profile(results, tmp_path / "out", "--model", "Test Model", "--run", "latest",
                   "--compare") == 0
    assert "sample 1 turn 0 (correct)" in capsys.readouterr().out
    cand = json.loads((tmp_path / "out" / f"{LABEL}_candidate" / "profile.json").read_text())
    assert "level1_problem9_sample1_turn0.py" in cand["config"]["subject"]
    # the extension's own kernel, not aten's gelu: its time is 'other'
    assert cand["category_share_pct"]["other"] > 50
    cmp = json.loads((tmp_path / "out" / f"{LABEL}_compare" / "compare.json").read_text())
    activation = next(r for r in cmp["categories"] if r["category"] == "activation")
    assert activation["reference_ms"] > 0 and activation["candidate_ms"] == 0, activation


@pytest.mark.parametrize("args, message", [
    (["--model", "nobody", "--run", "run1"], "--model nobody: no results at"),
    (["--model", "Test Model", "--run", "run9"], "runs there: run1"),
    (["--model", "Test Model", "--run", "run1", "--sample", "7"],
     "no saved code for sample 7 of bert/level1/9"),
    (["--model", "Test Model"], "--model and --run go together"),
    (["--sample", "1"], "--sample needs --model and --run"),
    (["--model", "Test Model", "--run", "run1", "--solution", str(CPP_GELU)],
     "either --solution FILE or --model/--run"),
])
def test_mistakes_are_one_line(results, tmp_path, capsys, args, message):
    assert profile(results, tmp_path / "out", *args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_one_problem_only(results, tmp_path, capsys):
    code = run_cli(main, ["--quiet", "--device", "cpu", "--source", "bert", "--level", "1",
                          "--results-dir", str(results), "--out", str(tmp_path),
                          "--model", "Test Model", "--run", "run1"])
    assert code == 2 and "narrow it with --level/--problems" in capsys.readouterr().err


def test_report_sample_view_shows_launches(tmp_path):
    from kb_eval.report.samples import CodeFinder, sample_view
    from kb_eval.results import LaunchCounts
    rec = SampleRecord(key=KEY, status="correct", correct=True,
                       launches=LaunchCounts(unit="aten_ops", candidate=1, reference=2))
    view = sample_view(rec, CodeFinder(tmp_path))
    assert view["launches"] == "candidate 1 (its own report) / reference 2 aten_ops per forward"
    assert sample_view(SampleRecord(key=KEY), CodeFinder(tmp_path))["launches"] is None
