"""The evaluator's own failures are never charged to a candidate (CPU, cpp backend):
a problem too large for this machine is `too_large`, a reference server killed in the
middle of a sample is replaced and the sample gets its true verdict, an exception in our
judging code is retried and then `eval_error`, counted apart; `check --harness` judges a
small KernelBench folder and exits 0. Problems are the public KernelBench level-1 files
(../shared/kernelbench), shrunk by the test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from candidates.eval_kit import tuned_config
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.judge.score import summarize
from kb_eval.faults import VAR
from kb_eval.problems import Problem, load_problems, reference_copy
from kb_eval.selfcheck import interleave_levels, row_of
from kb_eval.timing import TimingSettings

pytestmark = pytest.mark.slow

KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "level1"
# (file, {module constant: smaller value}): a few seconds each on a CPU.
SHRUNK = {"19_ReLU.py": {"batch_size": 8, "dim": 1024},
          "23_Softmax.py": {"batch_size": 8, "dim": 1024},
          "1_Square_matrix_multiplication_.py": {"N": 64}}


def shrink(code: str, sizes: dict[str, int]) -> str:
    for name, value in sizes.items():
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, flags=re.M)
        assert n == 1, f"{name} not found"
    return code


@pytest.fixture(scope="module")
def kb_folder(tmp_path_factory) -> Path:
    if not KERNELBENCH.is_dir():
        pytest.skip(f"{KERNELBENCH} is not here")
    root = tmp_path_factory.mktemp("kb")
    (root / "level1").mkdir()
    for name, sizes in SHRUNK.items():
        (root / "level1" / name).write_text(shrink((KERNELBENCH / name).read_text(), sizes))
    # A problem whose inputs alone (16 GiB) exceed any memory limit used here: the plan
    # must see that from shapes alone, without allocating them.
    huge = shrink((KERNELBENCH / "19_ReLU.py").read_text(), {"batch_size": 1 << 16,
                                                            "dim": 1 << 16})
    (root / "level1" / "101_HugeReLU.py").write_text(huge)
    return root


def config(tmp_path, cache, **kw) -> EvalConfig:
    return EvalConfig(backend="cpp", live_baseline=True, timing=TimingSettings(warmup=1, trials=3),
                      correct_trials=2, jobs=2, cache_dir=cache, results_dir=tmp_path / "r",
                      run_timeout_s=120, **kw)


def copies(folder: Path, ids: str) -> list:
    return [(p, 0, reference_copy(p)) for p in load_problems(str(folder), 1, ids)]


def test_check_harness_judges_every_copy(kb_folder, tmp_path, build_cache_dir):
    out = tmp_path / "harness.json"
    proc = subprocess.run([sys.executable, "-m", "kb_eval.check", "--harness", "--source",
                           str(kb_folder), "--level", "1", "--problems", "1,19,23",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **tuned_config(tmp_path / "config",
                                                            cache_dir=build_cache_dir)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "all 3 problem(s) judgeable here" in proc.stdout
    assert re.search(r"level1/19\s+ReLU\s+correct", proc.stdout), proc.stdout
    rows = json.loads(out.read_text())["problems"]
    assert [r["status"] for r in rows] == ["correct"] * 3
    assert all(r["deterministic"] is True and r["speedup"] > 0 for r in rows), rows
    assert all(r["median_ms"]["copy"] > 0 and r["median_ms"]["reference"] > 0 for r in rows)
    # each copy timed in pairs with its reference: a pairing that failed would say so here
    assert all(r["speedup_ci_method"] == "paired_rounds" and "unpaired" not in r["flags"]
               for r in rows), [(r["speedup_ci_method"], r["flags"]) for r in rows]


def test_harness_takes_the_levels_in_turns():
    problems = [Problem(source="s", level=lv, problem_id=i, name="p", code="")
                for lv, n in ((1, 3), (2, 2), (3, 1)) for i in range(1, n + 1)]
    order = [(p.level, p.problem_id) for p in interleave_levels(problems)]
    assert order == [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (1, 3)]


def test_children_overlap_on_a_gpu_only_unless_asked():
    """Three children in flight per GPU by default (check --harness, eval, run); on a CPU
    one, since the children would share the cores their timings run on; the config's
    DEFAULTS["lane_depth"] when it sets one always wins."""
    from kb_eval.cli import GPU_LANE_DEPTH, lane_depth
    from kb_eval.settings import Defaults

    unset, set_to_2 = Defaults(), Defaults(lane_depth=2)
    assert GPU_LANE_DEPTH > 1
    assert lane_depth(unset, cpu=False) == GPU_LANE_DEPTH
    assert lane_depth(unset, cpu=True) == 1
    assert lane_depth(set_to_2, cpu=False) == 2 == lane_depth(set_to_2, cpu=True)


def test_too_large_problem_is_not_the_candidates(kb_folder, tmp_path, build_cache_dir):
    out = tmp_path / "harness.json"
    proc = subprocess.run([sys.executable, "-m", "kb_eval.check", "--harness", "--source",
                           str(kb_folder), "--level", "1", "--problems", "19,101",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **tuned_config(tmp_path / "config",
                                                            mem_limit_mb=3000,
                                                            cache_dir=build_cache_dir)})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {r["key"].rsplit("/", 1)[1]: r for r in json.loads(out.read_text())["problems"]}
    assert rows["19"]["status"] == "correct"
    assert rows["101"]["status"] == "too_large", rows["101"]
    assert "16.0 GiB" in rows["101"]["reason"] and "2.9 GiB" in rows["101"]["reason"]
    # One clear line for the user, naming the problem and the bytes; no traceback.
    line = [ln for ln in proc.stderr.splitlines() if "too large" in ln]
    assert len(line) == 1 and "level1/101" in line[0] and "GiB" in line[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_reference_server_killed_mid_sample(kb_folder, tmp_path, build_cache_dir, monkeypatch):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "reference_kill").write_text("once")
    monkeypatch.setenv(VAR, str(faults))
    records = list(evaluate(copies(kb_folder, "19"), config(tmp_path, build_cache_dir)))
    assert not (faults / "reference_kill").exists(), "the fault never fired"
    assert [r.status for r in records] == ["correct"], records[0].error


def test_harness_exception_retried_then_eval_error(kb_folder, tmp_path, build_cache_dir,
                                                   monkeypatch):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "judge_exception").write_text("always")
    monkeypatch.setenv(VAR, str(faults))
    pairs = copies(kb_folder, "19")
    records = list(evaluate(pairs, config(tmp_path, build_cache_dir)))
    assert [r.status for r in records] == ["eval_error"]
    assert "injected fault" in records[0].error
    s = summarize(records, [p.key for p, _, _ in pairs])
    assert s.eval_errors == 1 and s.excluded_problems == [pairs[0][0].key]
    assert s.problems == 0 and "left out" in s.note  # not counted against the candidate

    (faults / "judge_exception").write_text("once")  # a passing fault: the retry judges
    records = list(evaluate(pairs, config(tmp_path, build_cache_dir)))
    assert [r.status for r in records] == ["correct"] and records[0].retried


@pytest.mark.parametrize("point, passing, lasting", [("setup_oom", "2", "eval_error"),
                                                    ("draw_oom", "once", "oom")])
def test_out_of_device_memory_in_our_code_is_tried_again(point, passing, lasting, kb_folder,
                                                         tmp_path, build_cache_dir,
                                                         monkeypatch):
    """`setup_oom`: a child out of device memory in its setup (before the candidate's code)
    on both tries, while the reference copy then sets up fine: memory was short then, not
    now. The candidate gets one more try in that room and its true verdict; out of memory
    in every setup (the control's too) is the evaluator's (`eval_error`).
    `draw_oom`: the child's own draw of a correctness trial's inputs out of device memory
    (on the H100 level1/97's 6 GiB of inputs, the server holding 65 GiB) was recorded as
    the candidate's crash. It is `oom` now, tried once more with the harness's memory
    given back: a passing shortage ends in the true verdict, one on the retry too is the
    candidate's own `oom` (its memory may be what is short), never left out."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / point).write_text(passing)
    monkeypatch.setenv(VAR, str(faults))
    records = list(evaluate(copies(kb_folder, "19"), config(tmp_path, build_cache_dir)))
    assert not (faults / point).exists(), "the fault did not fire as often as armed"
    assert [r.status for r in records] == ["correct"], records[0].error
    assert "OutOfMemoryError" in records[0].retried

    (faults / point).write_text("always")
    records = list(evaluate(copies(kb_folder, "19"), config(tmp_path, build_cache_dir)))
    assert [r.status for r in records] == [lasting], records[0].error
    assert records[0].retried


def test_a_paired_round_out_of_device_memory_keeps_the_server(kb_folder, tmp_path,
                                                              build_cache_dir, monkeypatch):
    """On the H100 (KernelBench level 1, three 8 GiB problems in flight) the reference
    server ran out of device memory drawing a paired round's inputs beside the stopped
    candidate; the exception ended the server, and with it the outputs it held for the
    other samples in flight: seven `eval_error`s. A round short of memory is tried once
    more with what the server only caches given back; short again, the sample keeps its
    unpaired timing (the reference timed alone once the candidate has ended), flagged."""
    faults = tmp_path / "faults"
    faults.mkdir()
    monkeypatch.setenv(VAR, str(faults))
    (faults / "round_oom").write_text("once")
    records = list(evaluate(copies(kb_folder, "19"), config(tmp_path, build_cache_dir)))
    assert not (faults / "round_oom").exists(), "the fault never fired"
    assert [r.status for r in records] == ["correct"], records[0].error
    assert records[0].speedup_ci_method == "paired_rounds" and not records[0].retried

    (faults / "round_oom").write_text("always")
    records = list(evaluate(copies(kb_folder, "19"), config(tmp_path, build_cache_dir)))
    record = records[0]
    assert [r.status for r in records] == ["correct"], record.error
    assert not record.retried and record.speedup is not None
    assert record.speedup_ci_method != "paired_rounds"
    unpaired = [f.message for f in record.flags if f.code == "unpaired"]
    assert len(unpaired) == 1 and "out of device memory" in unpaired[0], record.flags
    assert row_of(record)["unpaired"] == unpaired[0]  # check --harness's row says why

