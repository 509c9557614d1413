"""End to end on CPU: `python -m kb_eval.eval` over cpp candidates that are correct, wrong,
broken, or that crash in every way we know; the run survives each and records it."""

from __future__ import annotations

import json
import shutil

import pytest

from candidates import eval_kit as kit

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 20


@pytest.fixture(scope="module")
def config(tmp_path_factory, build_cache_dir) -> dict:
    """The config the runs here read: the session's build cache, a short run timeout."""
    return kit.tuned_config(tmp_path_factory.mktemp("config"), cache_dir=build_cache_dir,
                            warmup=1, run_timeout_s=RUN_TIMEOUT)


@pytest.fixture(scope="module")
def run(tmp_path_factory, config):
    """One CLI run over every cpp candidate (both problems), live baseline."""
    results = tmp_path_factory.mktemp("results")
    proc = kit.cli("--candidates", str(kit.CPP), "--source", str(kit.PROBLEMS),
                   "--backend", "cpp", "--live-baseline", "--trials", "3", "--jobs", "2",
                   "--name", "testmodel", "--run", "r1", "--results-dir", str(results),
                   env=config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = results / "testmodel" / "r1" / "results.json"
    data = json.loads(path.read_text())
    by_sample = {(s["problem_id"], s["sample"]): s for s in data["samples"]}
    return {"data": data, "by": by_sample, "proc": proc, "results": results, "path": path}


def test_every_sample_recorded(run):
    assert len(run["data"]["samples"]) == 12
    assert set(run["by"]) == {(1, i) for i in range(10)} | {(2, 0), (2, 1)}


def test_correct_cpp_kernel(run):
    r = run["by"][(1, 0)]
    assert r["status"] == "correct", r
    assert r["compiled"] and r["correct"]
    # 5 correctness trials + the re-checked timed calls (default 8, at most the 3 + 1 made)
    assert r["correctness"]["passed"] == r["correctness"]["trials"] == 5 + 4
    assert r["timing"]["n"] == 3 and r["baseline"]["n"] == 3 and r["baseline_source"] == "live"
    assert r["speedup"] > 0


def test_launch_counts_recorded_for_correct_samples(run):
    """One profiled call per side (CPU: outermost aten operators): the reference's
    2 * x + y is aten::mul then aten::add; the fused C++ op dispatches only the
    allocation of its output."""
    launches = run["by"][(1, 0)]["launches"]
    assert launches["unit"] == "aten_ops" and launches["error"] is None, launches
    assert launches["reference"] == 2
    assert launches["candidate"] == 1, launches  # aten::empty_like
    assert "untrusted" in launches["candidate_source"]
    assert run["by"][(2, 0)]["launches"]["reference"] == 2  # aten::linear, aten::relu
    wrong = [s for s in run["data"]["samples"] if not s["correct"]]
    assert wrong and all(s["launches"] is None for s in wrong)


def test_correct_python_model_gets_reference_weights(run):
    r = run["by"][(2, 0)]
    assert r["status"] == "correct", r
    assert r["correctness"]["max_abs_diff"] < 1e-5


def test_wrong_values(run):
    r = run["by"][(1, 1)]
    assert r["status"] == "incorrect" and r["compiled"] and not r["correct"]
    assert "values beyond" in r["error"]
    assert r["correctness"]["max_abs_diff"] == pytest.approx(0.01, rel=1e-3)
    assert r["speedup"] is None


def test_wrong_shape(run):
    r = run["by"][(1, 2)]
    assert r["status"] == "incorrect"
    assert "shape (64, 100) != expected (64, 128)" in r["error"]


def test_compile_error_kept_trimmed(run):
    r = run["by"][(1, 3)]
    assert r["status"] == "compile_error" and not r["compiled"]
    # the compiler's first diagnostic, not the ninja command (that stays in the detail)
    assert r["error"].startswith("main.cpp:") and "error: expected primary-expression" in \
        r["error"], r["error"]
    assert "error" in r["detail"] and "expected primary-expression" in r["detail"]
    assert len(r["detail"].splitlines()) <= 60


def test_python_syntax_error(run):
    r = run["by"][(2, 1)]
    assert r["status"] == "compile_error" and "SyntaxError" in r["error"]


@pytest.mark.parametrize("sample,kind", [(4, "segfault"), (5, "abort"), (6, "timeout"),
                                         (7, "exit")])
def test_crashes_recorded(run, sample, kind):
    r = run["by"][(1, sample)]
    assert r["crash"]["kind"] == kind, r
    assert r["status"] == ("timeout" if kind == "timeout" else "crashed")
    assert r["crash"]["phase"] == "correctness"
    assert not r["correct"]


def test_exit_output_tail_kept(run):
    assert "leaving now" in run["by"][(1, 7)]["crash"]["output_tail"]


def test_aliasing_and_mutation_flagged(run):
    r = run["by"][(1, 8)]
    assert r["status"] == "incorrect"
    codes = {f["code"] for f in r["flags"]}
    assert codes == {"output_aliases_input", "input_mutated"}


def test_tensor_subclass_rejected(run):
    r = run["by"][(1, 9)]
    assert r["status"] == "incorrect" and "not an exact torch.Tensor" in r["error"]


def test_summary(run):
    s = run["data"]["summary"]
    assert s["problems"] == 2 and s["samples"] == 12 and s["samples_per_problem"] == 10
    # problem 1: 1 of 10 correct, problem 2: 1 of 10 (2 recorded, 8 missing)
    assert s["correct_rate"] == pytest.approx((0.1 + 0.1) / 2)
    assert s["pass_at_k"]["pass@1"] == pytest.approx(0.1)
    assert s["status_counts"]["crashed"] == 3 and s["status_counts"]["timeout"] == 1


def test_header(run):
    d = run["data"]
    assert d["schema_version"] == 1 and d["kind"] == "run"
    assert d["hardware"]["device"] == "cpu" and d["precision"] == "fp32"
    assert d["backend"] == "cpp" and d["baseline"] == "live"
    assert "secret" not in json.dumps(d["config"])


def test_resume_skips_recorded(run, config):
    proc = kit.cli("--candidates", str(kit.CPP), "--source", str(kit.PROBLEMS),
                   "--backend", "cpp", "--live-baseline", "--name", "testmodel",
                   "--resume", "--results-dir", str(run["results"]), env=config)
    assert proc.returncode == 0, proc.stderr
    assert "0 sample(s) to evaluate (12 already recorded)" in proc.stdout
    assert len(json.loads(run["path"].read_text())["samples"]) == 12


def test_resume_evaluates_only_missing(run, tmp_path, config):
    """Drop two records; --resume evaluates exactly those two again."""
    data = json.loads(run["path"].read_text())
    results = tmp_path / "results"
    target = results / "testmodel" / "r1" / "results.json"
    target.parent.mkdir(parents=True)
    data["samples"] = [s for s in data["samples"] if (s["problem_id"], s["sample"]) not in
                       {(1, 1), (2, 0)}]
    target.write_text(json.dumps(data))
    proc = kit.cli("--candidates", str(kit.CPP), "--source", str(kit.PROBLEMS),
                   "--backend", "cpp", "--live-baseline", "--name", "testmodel", "--run", "r1",
                   "--resume", "--trials", "2", "--results-dir", str(results), env=config)
    assert proc.returncode == 0, proc.stderr
    assert "2 sample(s) to evaluate (10 already recorded)" in proc.stdout
    after = json.loads(target.read_text())
    assert len(after["samples"]) == 12
    statuses = {(s["problem_id"], s["sample"]): s["status"] for s in after["samples"]}
    assert statuses[(1, 1)] == "incorrect" and statuses[(2, 0)] == "correct"


# ------------------------------------------------------------------ user mistakes
def _one_line_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    return lines[0]


def test_missing_baseline_file_times_live_as_run_does(tmp_path, build_cache_dir):
    """Without a baseline file the eval times the reference live and says so (as
    kb_eval.run does); a file asked for by name (--baseline-compile) must exist."""
    cand = ["--candidates", str(kit.CPP / "level1_problem1_sample1.py"),
            "--source", str(kit.PROBLEMS), "--backend", "cpp", "--results-dir", str(tmp_path)]
    config = kit.tuned_config(tmp_path / "config", cache_dir=build_cache_dir, warmup=1,
                              correct_trials=1)
    line = _one_line_error(kit.cli(*cand, "--baseline-compile", "default", env=config))
    assert "baseline/cpu/local-" in line and "/fp32_compile-default.json is missing" in line
    assert "--compile default" in line and "--live-baseline" in line
    done = kit.cli(*cand, "--name", "nofile", "--trials", "2", "--quiet", env=config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "/fp32.json is missing" in done.stdout
    assert "timing the PyTorch reference live in this run instead" in done.stdout
    [path] = (tmp_path / "nofile").glob("*/results.json")
    results = json.loads(path.read_text())
    assert results["baseline"] == "live" and results["timing"]["method"] == "perf_counter"
    assert "level1/1" in done.stdout and "correct rate" in done.stdout  # the two tables


def test_bad_candidate_name_is_a_user_error(tmp_path):
    bad = tmp_path / "kernel.py"
    shutil.copy(kit.CPP / "level1_problem1_sample1.py", bad)
    line = _one_line_error(kit.cli("--candidates", str(bad), "--source", str(kit.PROBLEMS)))
    assert "level<L>_problem<ID>_sample<S>.py" in line


def test_unknown_problem_is_a_user_error(tmp_path):
    shutil.copy(kit.CPP / "level1_problem1_sample1.py", tmp_path / "level1_problem9_sample0.py")
    line = _one_line_error(kit.cli("--candidates", str(tmp_path), "--source", str(kit.PROBLEMS),
                                   "--live-baseline"))
    assert "level 1 problem 9" in line


def test_existing_run_without_resume_is_a_user_error(run):
    line = _one_line_error(kit.cli("--candidates", str(kit.CPP / "level1_problem1_sample1.py"),
                                   "--source", str(kit.PROBLEMS), "--backend", "cpp",
                                   "--live-baseline", "--name", "testmodel", "--run", "r1",
                                   "--results-dir", str(run["results"])))
    assert "--resume" in line


def test_help_explains_every_flag():
    proc = kit.cli("--help")
    assert proc.returncode == 0
    for flag in ("--candidates", "--source", "--backend", "--precision", "--name", "--run",
                 "--resume", "--live-baseline", "--trials", "--jobs", "--ray-address"):
        assert flag in proc.stdout
