"""A wrong answer is judged before its timing step (schedule/gate.py): on the CPU with
the cpp backend, a wrong candidate gets its verdict with no timing step run, from the same
comparisons the record shows; a correct one is timed and re-checked as before."""

from __future__ import annotations

import pytest

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.problems import load_problems
from kb_eval.timing import TimingSettings

pytestmark = pytest.mark.slow

WRONG = """import torch
import torch.nn as nn


class ModelNew(nn.Module):  # a leaky ReLU where the problem asks for ReLU: wrong values
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.leaky_relu(self.linear(x), 0.1)
"""


def test_wrong_answers_are_not_timed(tmp_path, build_cache_dir):
    problem = {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}[2]
    right = (kit.CPP / "level1_problem2_sample0.py").read_text()
    config = EvalConfig(backend="cpp", live_baseline=True, jobs=2, correct_trials=3,
                        timing=TimingSettings(warmup=1, trials=6), recheck_timed=1,
                        cache_dir=build_cache_dir, results_dir=tmp_path / "r",
                        run_timeout_s=120, extra_env={"PATH": kit.wrapper_path()})
    records = {r.sample: r for r in evaluate([(problem, 0, right), (problem, 1, WRONG)],
                                             config)}
    good, bad = records[0], records[1]
    assert good.status == "correct" and good.timing is not None and good.timing.n == 6
    assert good.correctness.trials == 4  # three trials and a timed call re-checked
    assert "child_timing" in good.phases, good.phases
    assert bad.status == "incorrect", bad
    assert bad.timing is None and "child_timing" not in bad.phases, bad.phases
    assert bad.correctness.trials == 3 and bad.correctness.passed == 0, bad.correctness
    assert (bad.error or "").startswith("correct_0: "), bad.error  # its first trial's
