"""No false positives: the hand-written reference solutions (reference_kernels/solutions),
evaluated through the whole pipeline with every defense on, must come out correct, with
their speedup counted and no warning or error flag.

CPU (CI): the two b64s64 problems whose C++ solutions test_run_noargs also builds (one
shared build cache, so no extra compile). The full CPU set was checked by hand (see the
report); the `gpu` test runs every CUDA solution (fp32, and bf16 where the index names a
bf16 variant)."""

from __future__ import annotations

import json

import pytest
import torch

from adversarial.evalrun import REPO, describe, run_eval, verdict_mismatches

pytestmark = pytest.mark.slow

SOLUTIONS = REPO / "reference_kernels" / "solutions"
BERT = REPO / "reference_kernels" / "problems" / "bert"
CLEAN = {"correct": True, "speedup_counted": True, "no_flags": True}
CPU_KEYS = ["bert/level1/8", "bert/level1/9"]


def _entries(backend: str, precision: str, keys=None) -> list:
    index = json.loads((SOLUTIONS / backend / "index.json").read_text())
    out = []
    for key, name in index.items():
        if keys is not None and key not in keys:
            continue
        if isinstance(name, dict):
            name = name.get(precision)
        if name:
            out.append((f"{key} {name}", key.split("/", 1)[1], SOLUTIONS / backend / name))
    return out


def _check(records: dict, entries: list) -> list[str]:
    bad = []
    for name, _, _ in entries:
        r = records.get(name)
        problems = ["no record"] if r is None else verdict_mismatches(r, CLEAN)
        if problems:
            bad.append(f"{name}: {problems}; got {describe(r) if r else '-'}")
    return bad


def test_cpp_solutions_clean(tmp_path, build_cache_dir):
    entries = _entries("cpp", "fp32", CPU_KEYS)
    proc, records, _ = run_eval(entries, backend="cpp", results_dir=tmp_path / "res",
                                cache_dir=build_cache_dir, problems=BERT,
                                args=("--trials", "3", "--jobs", "2"),
                                settings=dict(warmup=1, correct_trials=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _check(records, entries)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_solutions_clean(tmp_path, build_cache_dir, precision):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    entries = _entries("cuda", precision)
    proc, records, _ = run_eval(entries, backend="cuda", results_dir=tmp_path / "res",
                                cache_dir=build_cache_dir, problems=BERT,
                                args=("--precision", precision, "--trials", "30"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _check(records, entries)
