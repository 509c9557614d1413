"""Paired timing (kb_eval/eval/schedule/pairing.py): the reference, in its trusted server,
and the candidate, in its child, timed in alternating rounds of one sample's timing step;
the speedup's interval from the per-round ratios (judge/confidence.py). Through the CLI on
CPU: copies of the reference centre on 1.0 (never far above it); a
candidate that really is ~4x faster gets lo > 1, and fast_p_sig counts from the intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adversarial.evalrun import run_eval
from kb_eval.eval.judge.confidence import paired_interval, paired_speedup, widened
from kb_eval.eval.schedule.pairing import reference_rounds_before
from kb_eval.timing import TimingSettings, kept, paired_rounds, plan_timing

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
                               settings=dict(timing_budget_ms=0, warmup=3, correct_trials=2),
                               args=("--trials", "60", "--jobs", "1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rec, json.loads(path.read_text())["summary"]


@pytest.mark.slow
def test_reference_copies_hold_one_and_a_real_speedup_is_sig(tmp_path, build_cache_dir):
    rec, summary = _eval(tmp_path, build_cache_dir, copies=3)
    for name, r in rec.items():
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", (name, r)
        assert r["baseline_source"] == "live"
        assert len(r["baseline"]["rounds"]) == len(r["timing"]["rounds"]) == 20
        lo, hi = r["speedup_ci"]
        assert lo <= r["speedup"] <= hi, (name, r["speedup"], lo, hi)
        # The timing step's account: the reference's rounds and both sides' timed calls
        # inside it, in seconds (a copy's calls cost about what the reference's do)
        ph = r["phases"]
        assert 0 < ph["pair_reference_calls"] <= ph["pair_reference"] < ph["child_timing"], ph
        assert 0 < ph["child_timing_calls"] <= ph["child_timing"] - ph["pair_reference"], ph
        if name != "fast":
            assert 0.5 < ph["pair_reference_calls"] / ph["child_timing_calls"] < 2, ph
    # On this shared 2-core CPU a copy carries a bias of several percent either way that
    # no resampling of rounds sees (two processes' heaps and caches): over 9 runs of this
    # test (CI included) copies' speedups ranged 0.86-1.10, their lower ends up to 1.049,
    # and 3 to 6 of the 6 intervals held 1.0; a tenth run had all six copies at 0.85-0.92
    # (the bias is shared by a run's copies, so their middle moves with it). "A copy never counts as faster" is a GPU
    # claim (the H100 reference-copy sweep); here: copies centre on 1, none is far above
    # it, and a real 4x is significant.
    copies = {n: r for n, r in rec.items() if n != "fast"}
    speeds = sorted(r["speedup"] for r in copies.values())
    assert 0.8 <= (speeds[2] + speeds[3]) / 2 <= 1.15, speeds
    assert all(r["speedup_ci"][0] < 1.15 for r in copies.values()), copies
    assert rec["fast"]["speedup_ci"][0] > 1.5, rec["fast"]["speedup_ci"]
    # fast_1_sig counts exactly the samples whose interval is above 1 (the fast one among
    # them), over the 9 asked (3 problems x 3 samples: the copies' count)
    sig = sum(r["speedup_ci"][0] > 1.0 for r in rec.values())
    assert summary["fast_p_sig"]["fast_1"] == pytest.approx(sig / 9)
    assert summary["fast_p_sig"]["fast_2"] == pytest.approx(1 / 9)


def test_budget_cuts_the_timed_calls_of_slow_problems_on_both_sides(tmp_path, build_cache_dir):
    """The timing budget (DEFAULTS["timing_budget_ms"]): a reference call of several ms on this CPU against a 1 ms budget
    leaves one timed call per paired round (20 of the 60 asked), on both sides alike, and
    the rounds still pair; a budget of 0 keeps the 60."""
    cand = HERE / "candidates" / "matmul_copy.py"
    counts = {}
    for budget in ("1", "0"):
        proc, rec, _ = run_eval([("fast", "level1/3", cand)], backend="cpp",
                                results_dir=tmp_path / f"res{budget}", cache_dir=build_cache_dir,
                                problems=HERE / "problems",
                                env={"OMP_NUM_THREADS": "1"},
                                settings=dict(timing_budget_ms=float(budget), warmup=1,
                                              correct_trials=1),
                                args=("--trials", "60", "--jobs", "1"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        r = rec["fast"]
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", r
        assert len(r["baseline"]["rounds"]) == len(r["timing"]["rounds"]) == 20
        counts[budget] = (r["timing"]["n"], r["baseline"]["n"])
        assert r["phases"]["estimate"] >= 0
    assert counts == {"1": (20, 20), "0": (60, 60)}


def test_a_live_reference_is_timed_alone_only_where_no_rounds_timed_it(tmp_path):
    """The paired rounds time the reference beside each sample, so a live baseline does not
    time it alone as well (100 more calls per problem), unless a sample came back without
    rounds (pairing off or failed) or the baseline is a compiler's, which is built and timed
    alone rather than inside a candidate's timing step; once per problem at most. A sample
    with rounds takes its baseline from them (verdict.paired_reference)."""
    from kb_eval.eval.config import EvalConfig
    from kb_eval.eval.judge.references import ReferenceState, ReferenceStore
    from kb_eval.eval.judge.verdict import paired_reference
    from kb_eval.eval.schedule.context import EvalContext

    def store(**cfg) -> ReferenceStore:  # servers start at their first call: none here
        return ReferenceStore(EvalContext.create(EvalConfig(backend="cpp",
                                                            results_dir=tmp_path, **cfg)))

    live, state = store(live_baseline=True), ReferenceState()
    assert not live._wants_timing(state, paired=True) and live._wants_timing(state, paired=False)
    state.timed = True
    assert not live._wants_timing(state, paired=False)  # once per problem
    assert not store(live_baseline=False)._wants_timing(ReferenceState(), paired=False)
    compiled = store(live_baseline=True, baseline_mode="compile-default")
    assert compiled._wants_timing(ReferenceState(), paired=True)

    base = paired_reference({"rounds": [[2.0, 4.0], [3.0, 5.0]], "launch_ms": 0.5})
    assert (base.n, base.median, base.rounds, base.launch_ms) == (4, 3.5, [3.0, 4.0], 0.5)
    assert paired_reference({"error": "a reference round failed"}) is None


@pytest.mark.parametrize("untimed", [True, False])
def test_the_candidate_side_skips_the_rounds_untimed_calls_when_told(tmp_path, untimed):
    """child/paired.time_paired: the warmup, then per round one untimed call (only with
    TimingSettings.round_untimed) and the round's timed calls; the ledger hears of each
    untimed call. The parent's go files are all there, so no handshake waits."""
    import torch

    from kb_eval.eval.child.paired import time_paired

    settings = TimingSettings(warmup=2, trials=20, paired_rounds=10, round_spin_up_ms=0,
                              round_untimed=untimed)
    rounds = paired_rounds(settings)
    for r in range(len(rounds) + 1):
        (tmp_path / f"go_{r}").write_text("")
    seen, ended = [], []
    stats = time_paired(lambda i: seen.append(i), settings, torch.device("cpu"),
                        lambda i: [i], None, tmp_path, rounds, lambda: ended.append(1))
    timed = [i for r in rounds for i in r]
    assert [i for i in seen if i >= 0] == timed and stats.n == settings.trials
    untimed_calls = [i for i in seen if i < 0]
    assert len(untimed_calls) == 2 + untimed * len(rounds) and len(ended) == untimed * len(rounds)


def test_own_pace_lets_only_a_clearly_slower_side_warm_up_on_its_own_calls():
    """timing.plan_timing's own pace, by hand (no budget, unpaired: that step alone): 10 ms
    calls at least, and three times the reference's."""
    settings = TimingSettings(warmup=5, round_untimed=True, budget_ms=0)

    def own_pace(s: TimingSettings, own_ms, reference_ms) -> TimingSettings:
        return plan_timing(s, reference_ms=reference_ms, own_ms=own_ms, paired=False)

    slow = own_pace(settings, own_ms=40.0, reference_ms=4.0)
    assert (slow.warmup, slow.round_untimed) == (1, False)
    assert slow.trials == settings.trials and slow.paired_rounds == settings.paired_rounds
    for own, ref in ((40.0, 14.0), (8.0, 1.0), (40.0, None), (None, 4.0)):
        assert own_pace(settings, own, ref) == settings, (own, ref)
    assert own_pace(settings.model_copy(update={"warmup": 0}), 40.0, 4.0).warmup == 0


SLOW_SOFTMAX = '''
import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(0.03)  # 30 ms a call: far slower than the reference's ~1 ms
        return torch.softmax(x, dim=1)
'''


def _softmax_run(tmp_path, build_cache_dir, candidates: list) -> dict:
    """Records of (name, file) candidates for the softmax problem: 30 timed calls, 2
    warm-up calls, 3 correctness trials, on the CPU."""
    proc, rec, _ = run_eval([(name, "level1/2", path) for name, path in candidates],
                            backend="cpp", results_dir=tmp_path / "res",
                            cache_dir=build_cache_dir, problems=HERE / "problems",
                            env={"OMP_NUM_THREADS": "1"},
                            settings=dict(warmup=2, correct_trials=3),
                            args=("--trials", "30", "--jobs", "1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rec


def test_a_slow_candidate_starts_its_rounds_on_its_own_calls(tmp_path, build_cache_dir):
    """A candidate far slower than its reference makes no untimed call at the head of its
    rounds (its own calls warm the device up), while the reference's rounds and a copy's
    keep theirs; the rounds still pair and the verdicts stand."""
    slow = tmp_path / "slow_softmax.py"
    slow.write_text(SLOW_SOFTMAX)
    rec = _softmax_run(tmp_path, build_cache_dir,
                       [("slow", slow), ("copy", HERE / "candidates" / "softmax_copy.py")])
    for name in ("slow", "copy"):
        r = rec[name]
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", (name, r)
        assert r["phases"]["pair_reference_untimed"] > 0, (name, r["phases"])
    assert rec["slow"]["phases"].get("child_timing_untimed", 0) == 0, rec["slow"]["phases"]
    assert rec["copy"]["phases"]["child_timing_untimed"] > 0, rec["copy"]["phases"]
    assert rec["slow"]["speedup_ci"][1] < 0.34, rec["slow"]["speedup_ci"]


def test_slow_cut_by_hand():
    """timing.plan_timing's slow cut: ten times the reference's pace and more than a second
    of timed calls; as many one-call rounds as take about a second, at least five, never
    as many calls as before."""
    s = TimingSettings(trials=23, paired_rounds=20)

    def rounds_calls(s: TimingSettings, own_ms, reference_ms) -> tuple[int, int]:
        plan = plan_timing(s, reference_ms=reference_ms, own_ms=own_ms)
        return plan.paired_rounds, plan.trials

    cut = plan_timing(s, reference_ms=4.4, own_ms=370.0)
    assert (cut.paired_rounds, cut.trials, cut.n_calls) == (5, 5, 6)
    assert [len(r) for r in paired_rounds(cut)] == [2, 1, 1, 1, 1]  # the discarded first
    assert rounds_calls(s, 60.0, 4.4) == (17, 17)
    for own, ref in ((43.0, 4.4), (30.0, 1.0), (370.0, None), (None, 4.4)):
        assert rounds_calls(s, own, ref) == (20, 23), (own, ref)  # not that slow, no figure
    assert rounds_calls(TimingSettings(trials=5, paired_rounds=5), 370.0, 4.4) == (5, 5)
    assert rounds_calls(TimingSettings(paired_rounds=0), 370.0, 4.4)[0] == 0


def test_pairing_takes_a_cut_only_within_its_rounds(tmp_path):
    """The pairing adopts the rounds a child announced before its first handshake when
    they are fewer (or as many) and at least five; anything else is an error (unpaired)."""
    from kb_eval.eval.child.paired import ROUNDS_FILE
    from kb_eval.eval.schedule.pairing import Pairing

    settings = TimingSettings(trials=23, paired_rounds=20)
    for text, rounds, cut in (("5", 5, True), ("20", 20, True), ("4", 20, False),
                              ("21", 20, False), ("many", 20, False), (None, 20, False)):
        folder = tmp_path / str(text)
        p = Pairing(lambda r, s: {}, folder, settings, set())
        if text is not None:
            (folder / ROUNDS_FILE).write_text(text)
        p._take_cut()
        assert (p.rounds, p.cut) == (rounds, cut), text
        assert (p.error is None) == (cut or text is None), (text, p.error)
        if cut:
            assert p.settings.trials == rounds and len(paired_rounds(p.settings)) == rounds


VERY_SLOW = '''
import time
import torch
import torch.nn as nn

CALLS = [0]


class ModelNew(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        if CALLS[0] <= {slow_calls}:
            time.sleep(0.25)  # 250 ms a call: hundreds of times the reference's
        return torch.softmax(x, dim=1)
'''


def test_a_very_slow_candidate_is_timed_in_fewer_rounds(tmp_path, build_cache_dir):
    """A candidate hundreds of times slower than its reference is timed in five paired
    rounds of one call (timing.plan_timing), both sides alike: correct, paired, its
    re-checks complete, flagged `fewer_rounds` (info). One slow only in its correctness
    calls gets the same cut and a warning that it was not that slow."""
    slow, liar = tmp_path / "very_slow.py", tmp_path / "slow_then_fast.py"
    slow.write_text(VERY_SLOW.replace("{slow_calls}", "10**9"))
    liar.write_text(VERY_SLOW.replace("{slow_calls}", "3"))  # its 3 correctness calls
    rec = _softmax_run(tmp_path, build_cache_dir, [("slow", slow), ("liar", liar)])
    for name in ("slow", "liar"):
        r = rec[name]
        codes = {f["code"]: f["severity"] for f in r["flags"]}
        assert r["correct"] and r["speedup_ci_method"] == "paired_rounds", (name, r)
        assert len(r["timing"]["rounds"]) == len(r["baseline"]["rounds"]) == 5, (name, r)
        assert r["timing"]["n"] == r["baseline"]["n"] == 5
        assert codes.get("fewer_rounds") == "info", (name, codes)
        assert "unpaired" not in codes and "timed_recheck_missing" not in codes, codes
    assert rec["slow"]["speedup_ci"][1] < 0.1, rec["slow"]["speedup_ci"]
    assert "fewer_rounds_unfounded" not in {f["code"] for f in rec["slow"]["flags"]}
    assert "fewer_rounds_unfounded" in {f["code"] for f in rec["liar"]["flags"]}, rec["liar"]
