"""Paired timing (kb_eval/eval/schedule/pairing.py): the reference, in its trusted server,
and the candidate, in its child, timed in alternating rounds of one sample's timing step;
the speedup's interval from the per-round ratios (judge/confidence.py). Through the CLI on
CPU: copies of the reference get intervals holding 1.0 and never count in fast_1_sig; a
candidate that really is ~4x faster gets lo > 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversarial.evalrun import run_eval
from kb_eval.eval.judge.confidence import paired_interval, paired_speedup, widened
from kb_eval.eval.schedule.pairing import reference_rounds_before
from kb_eval.timing import TimingSettings, kept, paired_rounds

HERE = Path(__file__).resolve().parent / "paired"


def test_rounds_split_the_trials_exactly():
    settings = TimingSettings(trials=45, paired_rounds=20)  # and the discarded first call
    rounds = paired_rounds(settings)
    assert len(rounds) == 20 and [len(r) for r in rounds[1:]].count(2) == 15 - 1
    assert [i for r in rounds for i in r] == list(range(46))
    assert len(kept(settings, 0, list(rounds[0]))) == len(rounds[0]) - 1 == 2
    assert kept(settings, 1, [1.0, 2.0]) == [1.0, 2.0]
    assert sum(len(kept(settings, r, list(c))) for r, c in enumerate(rounds)) == 45
    assert paired_rounds(TimingSettings(trials=1)) == []  # too few for two rounds
    assert paired_rounds(TimingSettings(trials=50, paired_rounds=0)) == []


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_abba_order_times_each_reference_round_once(n):
    order = []
    for r in range(n + 1):  # the candidate's handshakes: before each round, after the last
        order += [("ref", q) for q in reference_rounds_before(r, n)]
        order += [("cand", r)] if r < n else []
    assert sorted(q for side, q in order if side == "ref") == list(range(n))
    # rounds 2j, 2j+1: reference, candidate, candidate, reference
    assert order[:4] == [("ref", 0), ("cand", 0), ("cand", 1), ("ref", 1)][:len(order)]


def test_paired_interval_cancels_drift_by_hand():
    # both sides slowed alike round by round (clock or load drift): every ratio is 2
    base = [2.0, 4.0, 8.0, 3.0, 10.0, 2.5]
    cand = [x / 2 for x in base]
    assert paired_interval(base, cand) == (2.0, 2.0)
    assert paired_speedup(base, cand) == 2.0
    # ratios 1 x5 and 3 x1: a resample's median is 1 unless 3 or more of its 6 draws are
    # the 3 (P = 6.2 %): 2.5 % quantile 1; 97.5 %: 2 (median of three 1s and three 3s)
    lo, hi = paired_interval([1.0] * 5 + [3.0], [1.0] * 6)
    assert lo == 1.0 and hi == pytest.approx(2.0)
    assert widened(1.0, 1.0) == pytest.approx([1 / 1.03, 1.03])


def _eval(tmp_path, build_cache_dir, copies: int):
    cands = HERE / "candidates"
    entries = ([(f"mm{i}", "level1/1", cands / "matmul_copy.py") for i in range(copies)]
               + [(f"sm{i}", "level1/2", cands / "softmax_copy.py") for i in range(copies)]
               + [("fast", "level1/3", cands / "matmul_copy.py")])
    # One intra-op thread per process: on a CPU shared with other jobs, a two-thread op's
    # calls ranged 1-80 ms within one sample (its threads wait on each other's time
    # slices), chaos within a round that no pairing removes.
    proc, rec, path = run_eval(entries, backend="cpp", results_dir=tmp_path / "res",
                               cache_dir=build_cache_dir, problems=HERE / "problems",
                               env={"OMP_NUM_THREADS": "1"},
                               args=("--trials", "60", "--warmup", "3",
                                     "--correct-trials", "2", "--jobs", "1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rec, json.loads(path.read_text())["summary"]


@pytest.mark.slow
def test_reference_copies_hold_one_and_a_real_speedup_is_sig(tmp_path, build_cache_dir):
    rec, summary = _eval(tmp_path, build_cache_dir, copies=3)
    holds = 0
    for name, r in rec.items():
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", (name, r)
        assert r["baseline_source"] == "live"
        assert len(r["baseline"]["rounds"]) == len(r["timing"]["rounds"]) == 20
        lo, hi = r["speedup_ci"]
        assert lo <= r["speedup"] <= hi, (name, r["speedup"], lo, hi)
        if name != "fast":
            assert lo <= 1.0, (name, lo, hi)  # never significantly faster than itself
            holds += hi >= 1.0
    # Measured on the loaded 2-core machine: 11 of 12 copies held 1.0, the other was
    # [0.80, 0.94] (slower, never faster); with two threads per process, 4 of 17 did not
    # (lo up to 1.15: the chaos above).
    assert holds >= 5, {n: r["speedup_ci"] for n, r in rec.items()}
    assert rec["fast"]["speedup_ci"][0] > 1.0, rec["fast"]["speedup_ci"]
    # fast_1_sig: the fast candidate's problem only, of the three asked; 3 samples are
    # asked per problem (the copies'), so its one sample is a third of its rate
    assert summary["fast_p_sig"]["fast_1"] == pytest.approx(1 / 9)
