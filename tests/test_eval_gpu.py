"""GPU: CUDA (load_inline) and Triton candidates, right and wrong, and an illegal memory
access that must not disturb the candidates evaluated after it on the same GPU."""

from __future__ import annotations

import queue
import threading

import pytest
import torch

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate, iter_queue
from kb_eval.problems import load_problems
from kb_eval.timing import TimingSettings

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def gpu_config(tmp_path, build_cache_dir, **kw) -> EvalConfig:
    return EvalConfig(backend=kw.pop("backend", "cuda"), live_baseline=True,
                      timing=TimingSettings(warmup=3, trials=20), recheck_timed=2,
                      cache_dir=build_cache_dir, results_dir=tmp_path / "results",
                      run_timeout_s=300, extra_env={"PATH": kit.wrapper_path()}, **kw)


@pytest.fixture(scope="module")
def problem():
    return {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}[1]


@pytest.fixture(scope="module")
def records(problem, tmp_path_factory, build_cache_dir):
    """CUDA right/wrong/illegal-access and Triton right/wrong, evaluated in one run."""
    tmp = tmp_path_factory.mktemp("gpu")
    pairs = [(problem, s, kit.source_of(kit.GPU / f"level1_problem1_sample{s}.py"))
             for s in range(5)]
    return {r.sample: r for r in evaluate(pairs, gpu_config(tmp, build_cache_dir))}


def test_cuda_correct(records):
    r = records[0]
    assert r.status == "correct", r
    assert r.correctness.trials == 5 + 2 and r.speedup is not None and r.timing.n == 20
    # compiled by the build child, with no GPU visible (not deferred to the run child)
    assert r.build.status == "ok" and r.compiled
    # both sides' launch times reach the record (the reference's through the pairing)
    assert r.timing.launch_ms is not None and r.baseline.launch_ms is not None, r


def test_cuda_incorrect(records):
    r = records[1]
    assert r.status == "incorrect" and r.compiled and "values beyond" in r.error


def test_illegal_memory_access_recorded(records):
    r = records[2]
    assert r.status == "crashed" and r.crash.kind == "cuda_error", r
    assert "illegal" in (r.error + (r.detail or "")).lower()


def test_triton_correct(records):
    assert records[3].status == "correct", records[3]
    assert records[3].build.status == "skipped"  # compiled on first call, in the run child


def test_triton_incorrect(records):
    assert records[4].status == "incorrect"


def test_after_illegal_access_the_next_candidates_are_fine(problem, tmp_path, build_cache_dir):
    """Same evaluation, same GPU: the bad kernel first, then good ones."""
    q: queue.Queue = queue.Queue()
    bad_done = threading.Event()

    def produce():
        q.put((problem, 2, kit.source_of(kit.GPU / "level1_problem1_sample2.py")))
        bad_done.wait(timeout=600)
        for s in (0, 3):
            q.put((problem, s, kit.source_of(kit.GPU / f"level1_problem1_sample{s}.py")))
        q.put(None)

    threading.Thread(target=produce, daemon=True).start()
    seen = []
    for r in evaluate(iter_queue(q), gpu_config(tmp_path, build_cache_dir)):
        seen.append((r.sample, r.status))
        bad_done.set()
    assert seen[0] == (2, "crashed")
    assert sorted(seen[1:]) == [(0, "correct"), (3, "correct")]


def test_triton_fp16(problem, tmp_path, build_cache_dir):
    [r] = list(evaluate([(problem, 3, kit.source_of(kit.GPU / "level1_problem1_sample3.py"))],
                        gpu_config(tmp_path, build_cache_dir, backend="triton", precision="fp16")))
    assert r.status == "correct" and r.precision == "fp16"
