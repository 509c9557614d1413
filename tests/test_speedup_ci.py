"""Speedups with a 95 % interval (kb_eval/eval/judge/confidence.py) and fast_p_sig: hand-
worked intervals, the score's counting, and a copy of the reference through the pipeline
(its interval holds 1.0; it never counts in fast_1_sig)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from adversarial.evalrun import PROBLEMS, run_eval
from kb_eval.eval.judge.confidence import (bootstrap_interval, normal_interval, resolution,
                                           speedup_interval)
from kb_eval.eval.judge.score import is_fast_sig, summarize
from kb_eval.results import Flag, SampleRecord
from kb_eval.timing import TimingStats, round_medians


def _stats(median: float, iqr: float, n: int, rounds=None) -> TimingStats:
    return TimingStats(mean=median, median=median, std=0.0, min=median - iqr, max=median + iqr,
                       p25=median - iqr / 2, p75=median + iqr / 2, n=n, rounds=rounds)


def test_round_medians_keep_call_order():
    assert round_medians([5.0, 1.0, 3.0]) == [5.0, 1.0, 3.0]
    assert round_medians(list(range(40))) == [0.5 + 2 * k for k in range(20)]
    assert len(round_medians(list(range(105)))) == 20
    assert TimingStats.of([3.0, 1.0, 2.0]).rounds == [3.0, 1.0, 2.0]


def test_normal_interval_by_hand():
    # sigma = IQR / 1.349: 0.2 and 0.1; se(median) = 1.2533 sigma / sqrt(100): 1.2533 % of
    # each median; half-width on the log scale 1.96 * hypot(0.012533, 0.012533) = 0.034739
    base, cand = _stats(2.0, 0.2 * 1.349, 100), _stats(1.0, 0.1 * 1.349, 100)
    lo, hi = normal_interval(base, cand)
    assert lo == pytest.approx(2 * math.exp(-0.034739), rel=1e-5)
    assert hi == pytest.approx(2 * math.exp(0.034739), rel=1e-5)
    # every interval is widened by the timing's resolution (3 %) on each side
    assert speedup_interval(base, cand) == ([lo / 1.03, hi * 1.03], "normal_iqr")


def test_a_launch_bound_call_widens_the_interval_by_its_launch_share():
    gpu_bound, host_bound = _stats(2.0, 0.0, 100), _stats(1.0, 0.0, 100)
    assert resolution(gpu_bound, host_bound) == pytest.approx(0.03)  # no launch times: 3 %
    host_bound.launch_ms = 1.2  # launches take all of the call (clipped at 1): 3 + 6 %
    gpu_bound.launch_ms = 0.5  # a quarter of its call
    assert resolution(gpu_bound) == pytest.approx(0.03 + 0.06 * 0.25)
    assert resolution(gpu_bound, host_bound) == pytest.approx(0.09)
    assert speedup_interval(gpu_bound, host_bound) == ([2 / 1.09, 2 * 1.09], "normal_iqr")


def test_bootstrap_interval_by_hand():
    assert bootstrap_interval([2.0] * 5, [1.0] * 5) == (2.0, 2.0)
    # candidate rounds 0.5 x5 and 1.0 x1: a resample's median is 0.5 unless 3 or more of its
    # 6 draws are the slow round: P(3) = 5.4 %, P(>=4) = 0.9 %. So the ratio is 2 (93.8 %),
    # 4/3 (5.4 %) or 1 (0.9 %): the 2.5 % quantile is 4/3, the 97.5 % one is 2.
    lo, hi = bootstrap_interval([1.0] * 6, [0.5] * 5 + [1.0])
    assert lo == pytest.approx(4 / 3) and hi == pytest.approx(2.0)
    same = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95]
    lo, hi = bootstrap_interval(same, list(reversed(same)))
    assert 0.9 / 1.1 <= lo < 1.0 < hi <= 1.1 / 0.9
    assert bootstrap_interval(same, same[::-1]) == (lo, hi)  # reproducible


def test_no_interval_from_too_few_calls():
    assert speedup_interval(_stats(1.0, 0.1, 2, [1.0, 1.0]), _stats(1.0, 0.1, 50)) is None
    assert speedup_interval(None, _stats(1.0, 0.1, 50)) is None


def _rec(key: str, speedup=None, ci=None, correct=True, flags=()) -> SampleRecord:
    return SampleRecord(key=key, status="correct" if correct else "incorrect", compiled=True,
                        correct=correct, speedup=speedup, speedup_ci=ci, flags=list(flags))


def test_fast_p_sig_counts_only_intervals_above_p():
    records = [_rec("a", 1.2, [1.05, 1.3]), _rec("b", 1.1, [0.95, 1.2]),
               _rec("c", 2.5, [2.1, 2.9], flags=[Flag(code="no_custom_kernel")]),
               _rec("d", correct=False), _rec("e", 1.6, None)]
    s = summarize(records, ["a", "b", "c", "d", "e"])
    assert s.fast_p["fast_1"] == pytest.approx(3 / 5)  # a, b, e
    assert s.fast_p_sig["fast_1"] == pytest.approx(1 / 5)  # a only
    assert s.fast_p_sig["fast_0"] == pytest.approx(2 / 5)  # a, b: no interval for e
    assert s.fast_p_sig["fast_1.5"] == 0.0 and s.fast_p["fast_1.5"] == pytest.approx(1 / 5)
    assert not is_fast_sig(records[2], 1.0)


@pytest.mark.slow
def test_reference_copy_is_never_fast_1_sig(tmp_path, build_cache_dir):
    """A copy of the reference with a custom kernel (counted): several samples, each with an
    interval; every one holds 1.0 here (CPU; the H100 figure is the lead's)."""
    copy = Path(__file__).resolve().parent / "speedup" / "aten_copy.py"
    entries = [(f"copy{i}", "level1/1", copy) for i in range(3)]
    proc, rec, path = run_eval(entries, backend="cpp", results_dir=tmp_path / "res",
                               cache_dir=build_cache_dir, problems=PROBLEMS,
                               args=("--trials", "30", "--jobs", "1"),
                               settings=dict(warmup=3, correct_trials=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, r in rec.items():
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", (name, r)
        lo, hi = r["speedup_ci"]
        assert lo <= r["speedup"] <= hi and lo < 1.0, (name, r["speedup"], lo, hi)
        assert "fast_1" in proc.stdout
    import json
    summary = json.loads(path.read_text())["summary"]
    assert summary["fast_p_sig"]["fast_1"] == 0.0
