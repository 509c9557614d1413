"""Timing policy: the settings (TimingSettings), the thresholds that shape a timing, how
many warm-up calls, timed calls and paired rounds a sample's timing gets (plan_timing,
its one entry point), how rounds are split (paired_rounds, kept) and summarised
(TimingStats, round_medians). Torch-free: what needs only the policy need not load
torch. The measurement itself (timers, device waits, the timed calls) is
kb_eval/timing.py's, which re-exports all of this.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from pydantic import BaseModel, Field, model_validator

# ----------------------------------------------------------------------- thresholds
# Every figure that shapes a timing, in one place; plan_timing's steps apply them.

# Calls at least this long start their paired rounds without an untimed call (_budgeted),
# and GPU-paced ones (not launch-bound) from GPU_PACED_UNTIMED_MAX_MS on: the round's
# spin-up (`round_spin_up_ms`) brings the clocks up, and the first call's host path is
# covered (`launch_cover_ms`); the untimed calls otherwise cost as much device time as
# the timed ones (docs/PERFORMANCE.md). Launch-bound calls, whose time is the host's
# pace, keep the untimed call up to UNTIMED_CALL_MAX_MS.
UNTIMED_CALL_MAX_MS = 10.0
GPU_PACED_UNTIMED_MAX_MS = 2.0


# A reference call whose host took at least this share of it to return (its launches) is
# launch-bound: timed with `launch_budget_ms`.
LAUNCH_BOUND_SHARE = 0.6

# The warm-up before the first round, in ms of calls (at least one call), for calls that
# are not launch-bound: both sides ran the problem's shapes already (correctness, the
# reference's outputs), each round starts on its spin-up and the first timed call is
# discarded; more warm-up held the device alone for nothing (docs/PERFORMANCE.md).
# Launch-bound calls (the host's pace) keep their `warmup`.
WARMUP_MS = 20.0

# A side at least this many times slower than the reference (and at UNTIMED_CALL_MAX_MS
# or more a call) warms up on its own calls (_own_pace): its correctness calls are timed
# by its host beside other children's work, so a margin keeps a candidate that merely
# ran beside a busy neighbour on the reference's protocol.
SLOW_SIDE_RATIO = 3.0

# A candidate this many times slower than the reference (_own_pace's figures), whose timed
# calls would take more than SLOW_CUT_MS, is timed in fewer paired rounds of one call each
# (_slow_cut): such candidates held the device alone for a large share of the timing
# steps (docs/PERFORMANCE.md). Their speedups are far from any fast_p threshold; the
# rounds that remain still give an interval.
SLOW_CUT_RATIO = 10.0
SLOW_CUT_MS = 1000.0
SLOW_CUT_MIN_ROUNDS = 5

# The most blocks a call's times are summarised in (TimingStats.rounds, round_medians),
# and the floor of `_budgeted`'s cut (one timed call per block).
MAX_ROUNDS = 20

# What settings stored before these fields existed were timed with (_stored_before).
STORED_BEFORE = {"round_spin_up_ms": 10.0, "launch_cover_ms": 0.0, "launch_budget_ms": 0.0}


class TimingSettings(BaseModel):
    warmup: int = Field(5, ge=0, description="untimed calls before timing")
    trials: int = Field(100, ge=1, description="timed calls kept in the statistics")
    flush_l2: bool = Field(True, description="zero a 2x-L2 buffer before each call (CUDA)")
    discard_first: bool = Field(True, description="time one extra call and drop the first")
    paired_rounds: int = Field(20, ge=0, description="eval: rounds in which the reference "
                               "and the candidate are timed alternately (0: no pairing)")
    round_spin_up_ms: float = Field(2.0, ge=0, description="eval: GPU work (ms) before "
                                    "each paired round, on both sides, so that a round "
                                    "after the other side's starts at full clocks")
    round_untimed: bool = Field(True, description="eval: one untimed call at the head of "
                                "each paired round, on both sides (False: the round starts "
                                "on its spin-up alone; with a budget, calls of 10 ms or "
                                "more never get it: it cost them as much again per round)")
    budget_ms: float = Field(100.0, ge=0, description="eval: fewer timed calls for long "
                             "ones: as many as take about this long at the reference's "
                             "speed, at least one per paired round, at most `trials` "
                             "(0: always `trials`)")
    launch_budget_ms: float = Field(1000.0, ge=0, description="eval: the budget "
                                           "instead of `budget_ms` (when larger) for a "
                                           "launch-bound reference (its host's launching "
                                           "takes most of a call: its time is the host's "
                                           "pace, which swings from one round to the next), "
                                           "so that its rounds have several calls each "
                                           "(0: `budget_ms` for every call)")
    launch_cover_ms: float = Field(0.25, ge=0, description="CUDA: GPU work (ms) queued "
                                   "after the flush, ahead of each call's start event, so "
                                   "that the host's path to the call's first kernel is not "
                                   "timed (it varied with the host's speed: drift)")
    method: str = Field("cuda_events+l2flush+cover+devwait", description="recorded with "
                        "results; speedups refuse to mix methods")
    cut: bool = Field(False, exclude=True, description="plan_timing's slow cut: fewer "
                      "rounds of one call (never stored or sent)")

    @model_validator(mode="before")
    @classmethod
    def _stored_before(cls, data: Any) -> Any:
        """Settings stored before a field existed (a dump: it has `method`) read back with
        what they were timed with, and a run resumed on them keeps it: 10 ms spin-ups (the
        old default; docs/PERFORMANCE.md) and no launch cover. Settings made in code name a
        few fields: they get the defaults."""
        if isinstance(data, dict) and {"method", "discard_first", "flush_l2"} <= data.keys():
            return {**STORED_BEFORE, **data}
        return data

    @property
    def n_calls(self) -> int:
        """The timed calls made: `trials`, and the discarded first one when there is one."""
        return self.trials + (1 if self.discard_first else 0)


def plan_timing(settings: TimingSettings, *, reference_ms: float | None = None,
                launch_ms: float | None = None, own_ms: float | None = None,
                paired: bool = True) -> TimingSettings:
    """The settings of one sample's timing, the policy's one entry point (thresholds: the
    constants above). In order:
    1. the budget at the reference's pace (`reference_ms` a call, `launch_ms` of it spent
       launching; _budgeted): about `budget_ms` of timed calls, and no warm-up or untimed
       calls beyond what warms the device, since round medians, not call counts, carry a
       speedup. Idempotent for the same figures: the parent plans with the reference's
       estimate, the child plans the parent's settings again with the same figures and
       its own pace, and gets the same budget;
    2. only with the candidate's own pace `own_ms` (the child's): a side far slower than
       the reference warms up on its own calls, which bring the clocks up (_own_pace);
       when `paired`, a very slow one is timed in fewer rounds of one call, its speedup
       far from any threshold (_slow_cut; the child announces them, cut_rounds)."""
    settings = _budgeted(settings, reference_ms, launch_ms)
    if own_ms is None:
        return settings
    settings = _own_pace(settings, own_ms, reference_ms)
    cut = _slow_cut(settings, own_ms, reference_ms) if paired else None
    return settings if cut is None else cut


def _budgeted(settings: TimingSettings, call_ms: float | None,
              launch_ms: float | None = None) -> TimingSettings:
    """The settings of one sample's paired timing when a reference call takes about
    `call_ms`, of which its host spent `launch_ms` launching it: `trials` cut to what fits
    in `budget_ms` (never below one call per paired round, or per block of the unpaired
    statistics), and no untimed call at the head of each round for calls of
    UNTIMED_CALL_MAX_MS or more (GPU_PACED_UNTIMED_MAX_MS for a GPU call that is not
    launch-bound), and warm-up calls worth WARMUP_MS (not launch-bound). Round medians and
    their interval are what a speedup rests on, not the call count. Not so where the
    host's pace is the time (launch-bound networks): one call a round is too few, so
    those get `launch_budget_ms` (docs/PERFORMANCE.md, "Timed calls per sample")."""
    if not settings.budget_ms or not call_ms or call_ms <= 0:
        return settings
    floor = min(settings.trials, max(settings.paired_rounds, MAX_ROUNDS))
    budget = settings.budget_ms
    launch_bound = bool(launch_ms and launch_ms >= LAUNCH_BOUND_SHARE * call_ms)
    if settings.launch_budget_ms and launch_bound:
        budget = max(budget, settings.launch_budget_ms)
    fit = math.ceil(budget / call_ms)
    update: dict = {"trials": max(floor, min(settings.trials, fit))}
    if not launch_bound:
        update["warmup"] = min(settings.warmup, max(1, math.ceil(WARMUP_MS / call_ms)))
    gpu_paced = launch_ms is not None and not launch_bound  # no launch figure: a CPU
    if call_ms >= (GPU_PACED_UNTIMED_MAX_MS if gpu_paced else UNTIMED_CALL_MAX_MS):
        # A round of one such call spent as long in its untimed call as in the timed
        # one, on both sides. Its round still starts on `round_spin_up_ms` of GPU work.
        update["round_untimed"] = False
    return settings.model_copy(update=update)


def _own_pace(settings: TimingSettings, own_ms: float | None,
              reference_ms: float | None) -> TimingSettings:
    """The candidate side's own settings once its calls are known to take about `own_ms`
    (its correctness calls after the first) against the reference's `reference_ms`: a
    side this slow (SLOW_SIDE_RATIO, UNTIMED_CALL_MAX_MS) warms up on one call and starts
    its rounds without an untimed call, as `_budgeted` has both sides do when the
    reference's calls are that long: each of its calls is GPU work enough to bring the
    clocks up. The reference side and the rounds' calls are unchanged (figures:
    docs/PERFORMANCE.md). A candidate that slows its correctness calls to get here only
    starts its rounds colder."""
    if own_ms is None or reference_ms is None or reference_ms <= 0:
        return settings
    if own_ms < max(UNTIMED_CALL_MAX_MS, SLOW_SIDE_RATIO * reference_ms):
        return settings
    return settings.model_copy(update={"round_untimed": False,
                                       "warmup": min(settings.warmup, 1)})


def _slow_cut(settings: TimingSettings, own_ms: float | None,
              reference_ms: float | None) -> TimingSettings | None:
    """The settings of a very slow candidate's paired timing: as many rounds of one timed
    call as take about SLOW_CUT_MS at its pace, at least SLOW_CUT_MIN_ROUNDS (both sides
    time those rounds: the reference server learns of the cut from the pairing, and the
    verdict warns when the candidate's timed calls turn out not to be that slow). None
    when the candidate is not that slow or the cut would save nothing."""
    rounds = len(paired_rounds(settings))
    if not rounds or own_ms is None or not reference_ms or reference_ms <= 0:
        return None
    if own_ms < SLOW_CUT_RATIO * reference_ms or own_ms * settings.n_calls <= SLOW_CUT_MS:
        return None
    k = min(rounds, max(SLOW_CUT_MIN_ROUNDS, math.ceil(SLOW_CUT_MS / own_ms)))
    if k >= settings.trials or k < SLOW_CUT_MIN_ROUNDS:  # nothing saved; too few rounds
        return None
    return cut_rounds(settings, k)


def cut_rounds(settings: TimingSettings, k: int) -> TimingSettings:
    """`settings` with `k` paired rounds of one timed call each."""
    return settings.model_copy(update={"paired_rounds": k, "trials": k, "cut": True})


def method_for(device_type: str, flush_l2: bool = True,
               cover_ms: float = TimingSettings.model_fields["launch_cover_ms"].default) -> str:
    """What `method` says for timings taken on this kind of device: a CPU clock is not CUDA
    events, and a baseline without L2 flushes or launch cover must not be mixed with
    candidates timed with them (the cover takes up to ~0.1 ms of host latency out of a
    call's time). `devwait`: work left on other streams is charged as the device-wide
    wait's excess (`_CudaTimer._late_work_ms`); files timed before say `devsync`, their
    calls up to ~0.13 ms longer when the host was slow to wait."""
    if device_type != "cuda":
        return "perf_counter"
    return "+".join(["cuda_events", *(["l2flush"] if flush_l2 else []),
                     *(["cover"] if cover_ms > 0 else []), "devwait"])


class TimingStats(BaseModel):
    mean: float
    median: float
    std: float
    min: float
    max: float
    p25: float
    p75: float
    n: int
    unit: str = "ms"
    # Medians of consecutive blocks of calls, in call order (at most MAX_ROUNDS): what a
    # speedup's confidence interval resamples (kb_eval/eval/judge/confidence.py). Drift
    # within the run shows up as spread between rounds. None in files from before.
    rounds: list[float] | None = None
    # Median host milliseconds from a call's start event to its end event being recorded:
    # the time to launch its work. Near `median`, the call is launch-bound (its time is
    # the host's speed at launching kernels, not the GPU's). None on a CPU.
    launch_ms: float | None = None

    @property
    def launch_share(self) -> float | None:
        """The share of a call's time its host spent launching it (at most 1): near 1, the
        time is the host's, and it moves between processes (docs/PERFORMANCE.md)."""
        if self.launch_ms is None or self.median <= 0:
            return None
        return min(1.0, self.launch_ms / self.median)

    @classmethod
    def of(cls, samples_ms: Sequence[float], launch_ms: float | None = None) -> "TimingStats":
        xs = sorted(samples_ms)
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        return cls(mean=statistics.fmean(xs), median=statistics.median(xs),
                   std=statistics.stdev(xs) if len(xs) > 1 else 0.0, min=xs[0], max=xs[-1],
                   p25=q[0], p75=q[2], n=len(xs), rounds=round_medians(samples_ms),
                   launch_ms=launch_ms)


def round_medians(samples_ms: Sequence[float], max_rounds: int = MAX_ROUNDS) -> list[float]:
    """Medians of `max_rounds` consecutive blocks of equal size (the calls beyond a
    multiple of the block size join the last block); one call per round when fewer."""
    xs = list(samples_ms)
    size = max(1, len(xs) // max_rounds)
    starts = list(range(0, len(xs), size))[:max_rounds]
    return [statistics.median(xs[s:(starts[k + 1] if k + 1 < len(starts) else len(xs))])
            for k, s in enumerate(starts)]


def paired_rounds(settings: TimingSettings) -> list[range]:
    """The calls' indices of each round of a paired timing (the eval's parent, child and
    reference server agree on them from the settings alone): `trials` calls split between
    the rounds, and the discarded first call (`discard_first`, index 0) at the head of
    round 0, dropped by both sides as `time_callable` drops it. [] when there are too few
    trials for two rounds or pairing is off."""
    n, t = min(settings.paired_rounds, settings.trials), settings.trials
    d = 1 if settings.discard_first else 0
    if n < 2:
        return []
    return [range(0 if r == 0 else r * t // n + d, (r + 1) * t // n + d) for r in range(n)]


def kept(settings: TimingSettings, r: int, samples: list[float]) -> list[float]:
    """A paired round's times without the discarded first call (round 0 only)."""
    return samples[1:] if r == 0 and settings.discard_first else samples
