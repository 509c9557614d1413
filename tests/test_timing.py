"""The timing module on CPU: statistics, warmup/discard accounting, fresh args per call."""

from __future__ import annotations

import statistics
import time

import pytest

from kb_eval.timing import TimingSettings, TimingStats, plan_timing, time_callable


def test_stats_of_known_samples():
    s = TimingStats.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.min, s.max, s.median, s.mean, s.n) == (1.0, 5.0, 3.0, 3.0, 5)
    assert s.p25 == 2.0 and s.p75 == 4.0
    assert s.std == pytest.approx(statistics.stdev([1, 2, 3, 4, 5]))


def test_calls_counted_and_first_discarded():
    calls = []
    stats = time_callable(lambda: calls.append(1), TimingSettings(warmup=3, trials=7))
    assert len(calls) == 3 + 7 + 1 and stats.n == 7
    calls.clear()
    stats = time_callable(lambda: calls.append(1),
                          TimingSettings(warmup=0, trials=4, discard_first=False))
    assert len(calls) == 4 and stats.n == 4


def test_cpu_clock_measures_the_call():
    stats = time_callable(lambda: time.sleep(0.01), TimingSettings(warmup=1, trials=5))
    assert 9.5 <= stats.median <= 60  # ms; generous upper bound for a loaded CI machine
    assert stats.min <= stats.p25 <= stats.median <= stats.p75 <= stats.max


def test_args_per_trial_and_outputs_seen():
    seen_args, seen_out = [], []
    time_callable(lambda x: x * 2, TimingSettings(warmup=2, trials=3, discard_first=False),
                  args_for_trial=lambda i: (seen_args.append(i) or i,),
                  on_output=lambda i, out: seen_out.append((i, out)))
    assert seen_args == [-1, -2, 0, 1, 2]  # negative indices are warmup calls
    assert seen_out == [(0, 0), (1, 2), (2, 4)]


def test_timers_keep_the_real_clock_when_a_candidate_replaces_it(monkeypatch):
    # a candidate that stops time.perf_counter_ns changes what its own code reads, not our
    # timer's reading (kb_eval/clocks.py binds the clocks before candidate code loads)
    import time as time_module

    from kb_eval.timing import _CpuTimer

    monkeypatch.setattr(time_module, "perf_counter_ns", lambda: 0)
    ms, _ = _CpuTimer().time_one(lambda: time_module.sleep(0.005), ())
    assert 4.0 < ms < 500.0, ms


def test_launch_share_is_the_hosts_part_of_a_call_capped_at_one():
    stats = TimingStats.of([2.0, 2.0, 2.0])
    assert stats.launch_share is None  # a CPU timing has no launch time
    assert stats.model_copy(update={"launch_ms": 0.5}).launch_share == 0.25
    # the host's clock and the GPU's events differ a little: never more than the call
    assert stats.model_copy(update={"launch_ms": 2.04}).launch_share == 1.0


def test_files_from_before_the_spin_up_setting_keep_their_settings():
    """A baseline file written before `round_spin_up_ms` or `launch_cover_ms` existed
    reads back with the behaviour it was timed with (10 ms, no cover), so `--resume`
    continues it instead of calling its settings different; a run that changes it says
    so in its settings."""
    old = TimingSettings(round_spin_up_ms=10.0).model_dump()
    del old["round_spin_up_ms"]
    assert TimingSettings.model_validate(old) == TimingSettings(round_spin_up_ms=10.0)
    assert TimingSettings.model_validate(old) != TimingSettings()  # the default is 2 ms now
    older = TimingSettings(launch_cover_ms=0).model_dump()
    del older["launch_cover_ms"]
    assert TimingSettings.model_validate(older).launch_cover_ms == 0
    # made in code, naming a few fields (the method among them): the defaults
    made = TimingSettings(trials=7, method="cuda_events+l2flush+cover+devwait")
    assert made.round_spin_up_ms == 2.0 and made.launch_cover_ms == 0.25
    assert TimingSettings(round_spin_up_ms=0) != TimingSettings()
    with pytest.raises(ValueError):
        TimingSettings(round_spin_up_ms=-1)
    with pytest.raises(ValueError):
        TimingSettings(launch_cover_ms=-0.1)


def parent_plan(settings: TimingSettings, call_ms, launch_ms=None) -> TimingSettings:
    """plan_timing's budget step: the parent's plan, at the reference's pace alone."""
    return plan_timing(settings, reference_ms=call_ms, launch_ms=launch_ms)


def test_budgeted_calls_by_hand():
    """timing.plan_timing's budget: trials cut to budget / call time, at least one per
    paired round (or per block of the unpaired statistics), never more than asked; 0 or
    no estimate: as asked."""
    s = TimingSettings(trials=100, paired_rounds=20, budget_ms=100)
    assert parent_plan(s, 0.01).trials == 100  # short calls: all of them
    assert parent_plan(s, 3.0).trials == 34  # ceil(100 / 3)
    assert parent_plan(s, 22.0).trials == 20  # one per round
    assert parent_plan(s, None).trials == parent_plan(s, 0).trials == 100
    assert parent_plan(s.model_copy(update={"budget_ms": 0}), 22.0).trials == 100
    assert parent_plan(s.model_copy(update={"trials": 12}), 22.0).trials == 12
    assert parent_plan(s.model_copy(update={"paired_rounds": 0}), 50.0).trials == 20
    # a call of 10 ms or more starts its rounds on the spin-up alone; shorter ones keep it
    assert [parent_plan(s, ms).round_untimed for ms in (0.01, 9.9, 10.0, 200.0)] == \
        [True, True, False, False]
    assert parent_plan(s.model_copy(update={"budget_ms": 0}), 200.0).round_untimed
    # on a GPU, a call its kernels pace does so from 2 ms on; a launch-bound one (the
    # host's pace) and a CPU's (no launch figure) from 10 ms
    assert [parent_plan(s, ms, 0.2).round_untimed for ms in (1.9, 2.0, 4.3)] == \
        [True, False, False]
    assert parent_plan(s, 4.3, 4.0).round_untimed
    assert parent_plan(s, 4.3, None).round_untimed
    assert not parent_plan(s, 12.0, 11.0).round_untimed
    assert parent_plan(s, 3.0).model_copy(update={"trials": 100}) == s  # nothing else moves
    # warm-ups worth 20 ms of calls, at least one; launch-bound calls keep all of theirs
    assert [parent_plan(s, ms, 0.1).warmup for ms in (0.01, 4.0, 4.1, 10.0, 200.0)] == \
        [5, 5, 5, 2, 1]
    assert parent_plan(s, 200.0, 199.0).warmup == 5
    assert parent_plan(s.model_copy(update={"warmup": 0}), 200.0).warmup == 0


def test_launch_bound_calls_get_their_own_budget():
    """A reference whose host spent most of a call launching it (LAUNCH_BOUND_SHARE) is
    timed with `launch_budget_ms` when that is larger; a GPU-bound one, one without a
    launch figure (a CPU), or settings stored before the field (0) keep `budget_ms`."""
    from kb_eval.timing import LAUNCH_BOUND_SHARE

    s = TimingSettings(trials=100, paired_rounds=20, budget_ms=100, launch_budget_ms=1000)
    assert parent_plan(s, 5.0, 4.9).trials == 100  # ceil(1000 / 5) capped at trials
    assert parent_plan(s, 20.0, 20.5).trials == 50
    assert parent_plan(s, 20.0, 0.4).trials == 20  # GPU-bound: 100 ms' worth, one a round
    assert parent_plan(s, 20.0, None).trials == 20
    edge = 20.0 * LAUNCH_BOUND_SHARE
    assert parent_plan(s, 20.0, edge).trials == 50
    assert parent_plan(s, 20.0, edge * 0.99).trials == 20
    assert parent_plan(s.model_copy(update={"launch_budget_ms": 50}), 5.0, 5.0).trials == 20
    assert parent_plan(s.model_copy(update={"budget_ms": 0}), 20.0, 20.0).trials == 100
    stored = TimingSettings.model_validate({**s.model_dump(), "launch_budget_ms": 0})
    assert parent_plan(stored, 20.0, 20.0).trials == 20
    old = {k: v for k, v in s.model_dump().items() if k != "launch_budget_ms"}
    assert TimingSettings.model_validate(old).launch_budget_ms == 0  # a dump from before
    assert parent_plan(TimingSettings.model_validate(old), 20.0, 20.0).trials == 20


# Settings and reference paces the budget's branches cover: short and long calls,
# GPU-paced, launch-bound and CPU (no launch figure), no budget, few trials or rounds.
PLAN_SETTINGS = [TimingSettings(), TimingSettings(trials=12), TimingSettings(trials=1),
                 TimingSettings(paired_rounds=0), TimingSettings(paired_rounds=40, trials=300),
                 TimingSettings(budget_ms=0), TimingSettings(warmup=0, launch_budget_ms=0)]
PACES = [(None, None), (0.0, None), (0.01, 0.005), (1.9, 0.2), (3.0, None), (4.3, 4.0),
         (12.0, 11.0), (20.0, 0.4), (20.0, 20.5), (200.0, 199.0), (1e4, None)]


def test_the_budget_is_the_same_planned_again():
    """The budget step is idempotent for the same pace: settings planned once and planned
    again with the same figures are the same settings."""
    for s in PLAN_SETTINGS:
        for call_ms, launch_ms in PACES:
            once = parent_plan(s, call_ms, launch_ms)
            assert parent_plan(once, call_ms, launch_ms) == once, (s, call_ms, launch_ms)


def test_the_childs_plan_keeps_the_parents_calls_and_rounds():
    """The child plans the parent's settings again with the same reference pace: without
    its own pace, the same settings; with one that is not slow, the same calls and
    rounds. Without the launch figure the budget would differ: the payload carries it."""
    for s in PLAN_SETTINGS:
        for call_ms, launch_ms in PACES:
            parent = parent_plan(s, call_ms, launch_ms)
            child = plan_timing(parent, reference_ms=call_ms, launch_ms=launch_ms)
            assert child == parent, (s, call_ms, launch_ms)
            paced = plan_timing(parent, reference_ms=call_ms, launch_ms=launch_ms,
                                own_ms=call_ms)
            assert (paced.trials, paced.paired_rounds) == \
                (parent.trials, parent.paired_rounds)
    parent = parent_plan(TimingSettings(), 20.0, 20.5)  # launch-bound: 50 calls
    assert plan_timing(parent, reference_ms=20.0).trials == 20 != parent.trials


def test_a_slow_candidate_gets_the_cut_rounds():
    """The child's plan with a pace ten times the reference's and more: the budget, the
    warm-up on its own calls, and the cut rounds of one call that the pairing takes
    (cut_rounds); unpaired, no cut."""
    from kb_eval.timing import cut_rounds

    parent = parent_plan(TimingSettings(), 4.4, 0.1)
    child = plan_timing(parent, reference_ms=4.4, launch_ms=0.1, own_ms=370.0)
    assert (child.paired_rounds, child.trials, child.warmup, child.round_untimed) == \
        (5, 5, 1, False)
    alone = plan_timing(parent, reference_ms=4.4, launch_ms=0.1, own_ms=370.0, paired=False)
    assert (alone.paired_rounds, alone.trials) == (parent.paired_rounds, parent.trials)
    assert child == cut_rounds(alone, 5)  # what the pairing makes of the announced five
    assert child.cut and not alone.cut and not parent.cut
    assert "cut" not in child.model_dump()  # the plan's, never stored or sent


def test_work_left_on_other_streams_is_the_device_waits_excess():
    """A CUDA call's charge for late work on other streams (timing._CudaTimer): nothing
    for a device-wide wait an idle device can take (HONEST_WAIT_MS, or 3x the calibrated
    wait + 0.02 ms when that is longer), the excess beyond it otherwise: not the host's
    way back to an event recorded after the wait, which put ~0.13 ms on honest calls."""
    from kb_eval.timing import HONEST_WAIT_MS, _CudaTimer
    timer = object.__new__(_CudaTimer)  # no CUDA here: only the rule
    timer.latency = (0.007, 0.01)
    assert timer._late_work_ms(0.05) == 0.0
    assert timer._late_work_ms(HONEST_WAIT_MS) == 0.0
    assert timer._late_work_ms(HONEST_WAIT_MS + 2.0) == pytest.approx(2.0)
    timer.latency = (0.05, 0.01)  # a slower host's calibration: its limit is 0.17 ms
    assert timer._late_work_ms(0.15) == 0.0
    assert timer._late_work_ms(1.17) == pytest.approx(1.0)
