"""python -m kb_eval.baseline --compile tvm on CPU (LLVM target): bundled ops problems are
exported, built by Apache TVM and timed; a problem TVM cannot import is recorded with its
reason and the run goes on; TVM's flags without --compile tvm are a user error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm", reason="the 'tvm' extra (apache-tvm) is not installed")

REPO = Path(__file__).resolve().parents[1]
FFT_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
'''
SQUARE_PROBLEM = FFT_PROBLEM.replace("torch.fft.rfft(x).abs()", "x * x + 1.0")


def baseline(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--quiet", "--device",
                           "cpu", "--trials", "2", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def test_tvm_times_ops_problems(tmp_path):
    out = tmp_path / "tvm.json"
    proc = baseline("--source", "ops", "--level", "1", "--problems", "15,19,23",
                    "--compile", "tvm", "--output", str(out), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["mode"] == "tvm"
    records = data["records"]
    assert set(records) == {"ops/level1/15", "ops/level1/19", "ops/level1/23"}
    for key, rec in records.items():
        assert rec["status"] == "ok", (key, rec.get("error"))
        assert rec["timing"]["n"] == 2 and rec["timing"]["median"] > 0
        assert '"kind":"llvm"' in rec["compiler"]["target"], rec["compiler"]
        assert rec["compiler"]["arch_source"] == "host (llvm)"


def test_unsupported_problem_is_recorded_and_run_goes_on(tmp_path):
    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    (level / "1_rfft.py").write_text(FFT_PROBLEM)
    (level / "2_square.py").write_text(SQUARE_PROBLEM)
    out = tmp_path / "tvm.json"
    proc = baseline("--source", str(tmp_path / "probs"), "--compile", "tvm",
                    "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(out.read_text())["records"]
    fft = next(r for r in records.values() if r["name"] == "rfft")
    assert fft["status"] == "error" and fft["timing"] is None
    assert "TVM Relax import failed" in fft["error"] and "_fft_r2c" in fft["error"]
    square = next(r for r in records.values() if r["name"] == "square")
    assert square["status"] == "ok" and square["timing"]["median"] > 0


@pytest.mark.parametrize("flags, message", [
    (["--tvm-tune", "4"], "--tvm-tune needs --compile tvm or tvm-noarch"),
    (["--tvm-tune", "4", "--compile", "default"], "needs --compile tvm"),
    (["--compile", "tvm", "--tvm-tune", "-1"], "--tvm-tune must be at least 0"),
])
def test_tvm_flag_mistakes_are_one_line(tmp_path, flags, message):
    proc = baseline("--source", "ops", "--problems", "15", "--output",
                    str(tmp_path / "x.json"), *flags, cwd=REPO)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_mode_strings_round_trip():
    from kb_eval.compilers.tvm import TvmOptions
    for options in (TvmOptions(), TvmOptions(arch=False), TvmOptions(tune_trials=64),
                    TvmOptions(arch=False, tune_trials=8)):
        assert TvmOptions.parse(options.mode) == options
    with pytest.raises(ValueError):
        TvmOptions.parse("tvm-fast")


def test_without_the_architecture_is_an_explicit_generic_arch():
    """A bare `cuda` target would take the architecture of the GPU TVM finds: --compile
    tvm-noarch names sm_50 instead, and says so (built here without a GPU: no device is
    asked)."""
    import torch
    from kb_eval.compilers.tvm import GENERIC_CUDA_ARCH, TvmOptions, make_target, target_facts
    target = make_target(torch.device("cuda", 0), arch=False)
    facts = target_facts(target, TvmOptions(arch=False))
    assert facts["arch"] == GENERIC_CUDA_ARCH == "sm_50"
    assert facts["arch_source"].startswith("generic (sm_50")


def test_eval_scores_against_the_tvm_file(tmp_path, build_cache_dir):
    """--baseline-compile tvm: the eval reads <precision>_tvm.json (made by --compile tvm)
    and every correct sample's speedup is over TVM's median, not eager's."""
    from candidates import eval_kit as kit
    results = tmp_path / "results"
    proc = baseline("--source", str(kit.PROBLEMS), "--compile", "tvm", "--trials", "3",
                    "--results-dir", str(results), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tvm_file = results / "baseline" / "cpu" / "local-problems" / "fp32_tvm.json"
    medians = {k: r["timing"]["median"]
               for k, r in json.loads(tvm_file.read_text())["records"].items()}
    cands = tmp_path / "cands"
    cands.mkdir()
    (cands / "level1_problem1_sample0.py").write_text(
        (kit.CPP / "level1_problem1_sample0.py").read_text())
    proc = kit.cli("--candidates", str(cands), "--source", str(kit.PROBLEMS), "--backend",
                   "cpp", "--baseline-compile", "tvm", "--trials", "3",
                   "--name", "m", "--run", "r1", "--results-dir", str(results),
                   env=kit.tuned_config(tmp_path / "config", cache_dir=build_cache_dir))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = json.loads((results / "m" / "r1" / "results.json").read_text())
    assert run["baseline"] == str(tvm_file)
    (rec,) = run["samples"]
    assert rec["status"] == "correct"
    # the file's TVM median gives the secondary figure; the headline is the reference
    # compiled the same way (the server builds it with TVM) timed in the sample's rounds
    file_ms = medians[rec["key"]]
    assert rec["speedup_vs_baseline"] == pytest.approx(file_ms / rec["timing"]["median"])
    if rec["speedup_ci_method"] == "paired_rounds":
        lo, hi = rec["speedup_ci"]
        assert rec["baseline_source"] == "live" and lo <= rec["speedup"] <= hi
    else:  # unpaired: the file's time is the only reference time
        assert rec["baseline"]["median"] == file_ms
        assert rec["speedup"] == pytest.approx(file_ms / rec["timing"]["median"])


def test_missing_tvm_file_names_the_command(tmp_path):
    from candidates import eval_kit as kit
    proc = kit.cli("--candidates", str(kit.CPP), "--source", str(kit.PROBLEMS), "--backend",
                   "cpp", "--baseline-compile", "tvm-noarch", "--results-dir",
                   str(tmp_path / "results"), "--name", "m", "--run", "r1")
    assert proc.returncode == 2
    assert "fp32_tvm-noarch.json is missing" in proc.stderr
    assert "--compile tvm-noarch" in proc.stderr and "Traceback" not in proc.stderr


SQUARE_CANDIDATE = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline("kb_test_tvm_square", functions=["square1"], cpp_sources=r"""
torch::Tensor square1(torch::Tensor x) { return x * x + 1.0; }
""")


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.square1(x)
'''
RFFT_CANDIDATE = SQUARE_CANDIDATE.replace("square1", "rfft_abs").replace(
    "kb_test_tvm_square", "kb_test_tvm_rfft").replace("x * x + 1.0", "at::abs(at::fft_rfft(x))")


def test_eval_times_the_tvm_baseline_live(tmp_path, build_cache_dir):
    """--live-baseline --baseline-compile tvm: the reference server builds the reference
    with TVM once per problem and times that, paired rounds included; a problem TVM cannot
    take is judged all the same, with no speedup and a no_baseline flag giving TVM's
    reason. The report keeps such runs apart from eager ones; a resume must match."""
    from candidates import eval_kit as kit
    from kb_eval.report.runs import baseline_kind
    from kb_eval.results import RunFile
    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    (level / "1_square.py").write_text(SQUARE_PROBLEM)
    (level / "2_rfft.py").write_text(FFT_PROBLEM)
    cands = tmp_path / "cands"
    cands.mkdir()
    (cands / "level1_problem1_sample0.py").write_text(SQUARE_CANDIDATE)
    (cands / "level1_problem2_sample0.py").write_text(RFFT_CANDIDATE)
    args = ["--candidates", str(cands), "--source", str(tmp_path / "probs"), "--backend",
            "cpp", "--live-baseline", "--trials", "6", "--name", "m",
            "--run", "r1", "--results-dir", str(tmp_path / "results")]
    config = kit.tuned_config(tmp_path / "config", cache_dir=build_cache_dir)
    proc = kit.cli(*args, "--baseline-compile", "tvm", env=config)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = json.loads((tmp_path / "results" / "m" / "r1" / "results.json").read_text())
    assert run["baseline"] == "live" and run["config"]["baseline_mode"] == "tvm"
    square, rfft = sorted(run["samples"], key=lambda r: r["problem_id"])
    assert square["status"] == rfft["status"] == "correct", (square, rfft)
    assert square["baseline_source"] == "live" and square["baseline"]["median"] > 0
    assert square["speedup"] > 0 and square["speedup_ci_method"] == "paired_rounds"
    assert not [f for f in square["flags"] if f["code"] == "no_baseline"]
    assert rfft["speedup"] is None and rfft["baseline"] is None
    (flag,) = [f for f in rfft["flags"] if f["code"] == "no_baseline"]
    assert "no tvm baseline" in flag["message"] and "TVM Relax import failed" in flag["message"]
    assert baseline_kind(RunFile.model_validate(run)) == "live (tvm)"
    proc = kit.cli(*args, "--resume", env=config)  # eager this time: not the run's baseline
    assert proc.returncode == 2 and "baseline mode tvm, this call eager" in proc.stderr
