"""Scoring math against hand-computed cases (pure functions, no children)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from kb_eval.eval.judge.score import fast_p_name, geometric_mean, pass_at_k, summarize
from kb_eval.results import Flag, SampleRecord


def rec(key, sample, status, speedup=None, turn=0, flags=()):
    correct = status == "correct"
    return SampleRecord(key=key, sample=sample, turn=turn, status=status, correct=correct,
                        compiled=status not in ("compile_error", "missing"),
                        speedup=speedup, flags=list(flags))


@pytest.mark.parametrize("n,c,k,expected", [
    (10, 3, 1, 0.3),
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
    (4, 0, 2, 0.0),
    (4, 4, 2, 1.0),
    (3, 1, 3, 1.0),  # n - c < k: every draw of 3 holds the correct one
    (1000, 1, 1, 0.001),
])
def test_pass_at_k_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_stable_for_large_n():
    exact = 1 - Fraction(math.comb(100, 50), math.comb(200, 50))
    assert pass_at_k(200, 100, 50) == pytest.approx(float(exact), rel=1e-12)
    assert 0.0 <= pass_at_k(10_000, 3, 100) <= 1.0


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_fast_p_names():
    assert [fast_p_name(p) for p in (0, 0.5, 0.8, 1.0, 1.5, 2.0)] == [
        "fast_0", "fast_0.5", "fast_0.8", "fast_1", "fast_1.5", "fast_2"]


def test_summary_hand_computed():
    """A: correct 2.5x + incorrect; B: correct 0.9x + compile error; C: nothing came back."""
    records = [rec("s/level1/1", 0, "correct", 2.5), rec("s/level1/1", 1, "incorrect"),
               rec("s/level1/2", 0, "correct", 0.9), rec("s/level1/2", 1, "compile_error")]
    s = summarize(records, ["s/level1/1", "s/level1/2", "s/level1/3"], samples_per_problem=2)
    assert s.problems == 3 and s.samples == 4
    assert s.compiled_rate == pytest.approx(3 / 4)  # of the recorded samples
    assert s.correct_rate == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert s.fast_p["fast_0"] == pytest.approx(1 / 3)
    assert s.fast_p["fast_0.8"] == pytest.approx(1 / 3)
    assert s.fast_p["fast_1"] == pytest.approx(1 / 6)
    assert s.fast_p["fast_1.5"] == pytest.approx(1 / 6)
    assert s.fast_p["fast_2"] == pytest.approx(1 / 6)
    assert s.geomean_speedup == pytest.approx(math.sqrt(2.5 * 0.9))
    assert s.pass_at_k["pass@1"] == pytest.approx(1 / 3)
    assert "pass@5" not in s.pass_at_k  # k > n: not estimable
    assert s.status_counts == {"correct": 2, "incorrect": 1, "compile_error": 1}


def test_compiled_rate_is_over_the_recorded_samples():
    """Samples 0 and 2 of one problem, sample 0 of two others, one compiled: 1 of 4
    recorded compiled (25 %), however many samples per problem were asked."""
    records = [rec("s/level1/1", 0, "correct", 1.2), rec("s/level1/1", 2, "compile_error"),
               rec("s/level1/2", 0, "compile_error"), rec("s/level1/3", 0, "compile_error")]
    s = summarize(records, ["s/level1/1", "s/level1/2", "s/level1/3"], samples_per_problem=2)
    assert s.samples == 4 and s.compiled_rate == pytest.approx(0.25)
    assert s.correct_rate == pytest.approx((1 / 2) / 3)  # still of the samples asked


def test_pass_at_2_in_summary():
    """A: 1 of 2 correct -> pass@2 = 1; B: 0 of 2 -> 0."""
    records = [rec("a", 0, "correct", 1.2), rec("a", 1, "incorrect")]
    s = summarize(records, ["a", "b"], samples_per_problem=2, ks=(1, 2))
    assert s.pass_at_k == pytest.approx({"pass@1": (0.5 + 0) / 2, "pass@2": (1 + 0) / 2})


def test_kernelbench_case_one_sample_per_problem():
    records = [rec("p1", 0, "correct", 1.0), rec("p2", 0, "correct", 3.0),
               rec("p3", 0, "crashed"), rec("p4", 0, "correct", 0.5)]
    s = summarize(records, ["p1", "p2", "p3", "p4", "p5"])
    assert s.correct_rate == pytest.approx(3 / 5)
    assert s.fast_p["fast_1"] == pytest.approx(1 / 5)  # speedup == 1.0 is not > 1
    assert s.fast_p["fast_0"] == pytest.approx(3 / 5)
    assert s.geomean_speedup == pytest.approx((1.0 * 3.0 * 0.5) ** (1 / 3))


def test_error_flag_makes_sample_not_correct_nor_fast():
    bad = rec("p1", 0, "correct", 5.0, flags=[Flag(code="x", severity="error")])
    warn = rec("p2", 0, "correct", 5.0, flags=[Flag(code="y", severity="warning")])
    s = summarize([bad, warn], ["p1", "p2"])
    assert s.correct_rate == 0.5 and s.fast_p["fast_2"] == 0.5


def test_latest_turn_counts_and_unasked_ignored():
    records = [rec("p1", 0, "incorrect", turn=0), rec("p1", 0, "correct", 2.0, turn=1),
               rec("other", 0, "correct", 9.0)]
    s = summarize(records, ["p1"])
    assert s.samples == 1 and s.correct_rate == 1.0 and s.geomean_speedup == 2.0


def test_empty_and_geomean_edge_cases():
    s = summarize([], [])
    assert s.problems == 0 and s.correct_rate == 0.0 and s.geomean_speedup is None
    assert geometric_mean([]) is None
    assert geometric_mean([4.0, 1.0]) == pytest.approx(2.0)


def test_baseline_file_figure_is_secondary():
    """fast_p and the geomean count the paired speedup; the file's figure has its own
    geomean beside it and moves nothing else (one reference time per sample)."""
    a = rec("level1/1", 0, "correct", speedup=1.0)
    a.speedup_vs_baseline = 4.0  # an inflated file
    b = rec("level1/2", 0, "correct", speedup=0.5)
    b.speedup_vs_baseline = 1.0
    s = summarize([a, b], ["level1/1", "level1/2"])
    assert s.fast_p[fast_p_name(1.0)] == 0.0  # 1.0 is not above 1: the file's 4x not used
    assert s.geomean_speedup == pytest.approx(math.sqrt(0.5))
    assert s.geomean_vs_baseline == pytest.approx(2.0)
    voided = rec("level1/2", 0, "correct", speedup=0.5, flags=[Flag(code="no_custom_kernel")])
    voided.speedup_vs_baseline = 9.0
    assert summarize([a, voided], ["level1/1", "level1/2"]).geomean_vs_baseline == 4.0
