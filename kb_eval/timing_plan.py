"""Timing policy, torch-free: the settings, the thresholds, how many calls and paired
rounds a sample's timing gets (plan_timing), how rounds are split and summarised. The
measurement itself is kb_eval/timing.py's, which re-exports all of this.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from pydantic import BaseModel, Field, model_validator

# Every figure that shapes a timing (figures behind them: docs/PERFORMANCE.md).

# Calls at least this long (GPU-paced ones: GPU_PACED_UNTIMED_MAX_MS) start their paired
# rounds without an untimed call: the spin-up warms the clocks, the cover hides the host.
UNTIMED_CALL_MAX_MS = 10.0
GPU_PACED_UNTIMED_MAX_MS = 2.0


# A reference call whose launches took this share of it is launch-bound.
LAUNCH_BOUND_SHARE = 0.6

# The warm-up before the first round in ms of calls (at least one), when not launch-bound:
# both sides ran the shapes already and each round starts on its spin-up.
WARMUP_MS = 20.0

# A side this many times slower than the reference (and >= UNTIMED_CALL_MAX_MS a call)
# warms up on its own calls; the margin covers correctness calls timed beside neighbours.
SLOW_SIDE_RATIO = 3.0

# A candidate this many times slower, whose timed calls would take over SLOW_CUT_MS, is
# timed in fewer rounds of one call (_slow_cut): its speedup is far from any threshold.
SLOW_CUT_RATIO = 10.0
SLOW_CUT_MS = 1000.0
SLOW_CUT_MIN_ROUNDS = 5

# The most blocks a call's times are summarised in, and the floor of `_budgeted`'s cut.
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
        """A stored dump (it has `method`) from before a field existed reads back with what
        it was timed with (STORED_BEFORE); settings made in code get the defaults."""
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
    """The settings of one sample's timing, the policy's one entry point:
    1. the budget at the reference's pace (_budgeted), idempotent: the child plans the
       parent's plan again with the same figures and gets the same budget;
    2. with the candidate's own pace `own_ms` (the child's): a far slower side warms up on
       its own calls (_own_pace) and, when `paired`, a very slow one is cut to fewer rounds
       of one call (_slow_cut; `cut` says so, and the child announces them)."""
    settings = _budgeted(settings, reference_ms, launch_ms)
    if own_ms is None:
        return settings
    settings = _own_pace(settings, own_ms, reference_ms)
    cut = _slow_cut(settings, own_ms, reference_ms) if paired else None
    return settings if cut is None else cut


def _budgeted(settings: TimingSettings, call_ms: float | None,
              launch_ms: float | None = None) -> TimingSettings:
    """Settings for reference calls of about `call_ms` (`launch_ms` of it launching):
    `trials` cut to what fits in `budget_ms` (`launch_budget_ms` when launch-bound), never
    below one per round or block; no untimed call for long calls; warm-up worth WARMUP_MS
    (docs/PERFORMANCE.md, "Timed calls per sample")."""
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
        update["round_untimed"] = False
    return settings.model_copy(update=update)


def _own_pace(settings: TimingSettings, own_ms: float | None,
              reference_ms: float | None) -> TimingSettings:
    """The candidate side's settings at its own pace `own_ms`: a side this slow
    (SLOW_SIDE_RATIO, UNTIMED_CALL_MAX_MS) warms up on one call and makes no untimed call;
    its own calls bring the clocks up. Faking the pace only starts its rounds colder."""
    if own_ms is None or reference_ms is None or reference_ms <= 0:
        return settings
    if own_ms < max(UNTIMED_CALL_MAX_MS, SLOW_SIDE_RATIO * reference_ms):
        return settings
    return settings.model_copy(update={"round_untimed": False,
                                       "warmup": min(settings.warmup, 1)})


def _slow_cut(settings: TimingSettings, own_ms: float | None,
              reference_ms: float | None) -> TimingSettings | None:
    """A very slow candidate's paired timing: rounds of one call worth about SLOW_CUT_MS
    at its pace, at least SLOW_CUT_MIN_ROUNDS; None when not that slow or nothing saved."""
    rounds = len(paired_rounds(settings))
    if not rounds or own_ms is None or not reference_ms or reference_ms <= 0:
        return None
    if own_ms < SLOW_CUT_RATIO * reference_ms or own_ms * settings.n_calls <= SLOW_CUT_MS:
        return None
    k = min(rounds, max(SLOW_CUT_MIN_ROUNDS, math.ceil(SLOW_CUT_MS / own_ms)))
    if k >= settings.trials or k < SLOW_CUT_MIN_ROUNDS:
        return None
    return cut_rounds(settings, k)


def cut_rounds(settings: TimingSettings, k: int) -> TimingSettings:
    """`settings` with `k` paired rounds of one timed call each."""
    return settings.model_copy(update={"paired_rounds": k, "trials": k, "cut": True})


def method_for(device_type: str, flush_l2: bool = True,
               cover_ms: float = TimingSettings.model_fields["launch_cover_ms"].default) -> str:
    """What `method` says for timings on this device, so that timings taken differently
    (no flush, no cover, `devsync` before `devwait`) are never mixed."""
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
    # Medians of consecutive blocks of calls (at most MAX_ROUNDS), what a speedup's
    # interval resamples (eval/judge/confidence.py). None in older files.
    rounds: list[float] | None = None
    # Median host ms to launch a call's work: near `median`, launch-bound. None on a CPU.
    launch_ms: float | None = None

    @property
    def launch_share(self) -> float | None:
        """The share of a call's time its host spent launching it (at most 1)."""
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
    """The calls' indices of each round of a paired timing, from the settings alone (all
    sides agree): `trials` split between rounds, the discarded first call heading round 0.
    [] with fewer than two rounds."""
    n, t = min(settings.paired_rounds, settings.trials), settings.trials
    d = 1 if settings.discard_first else 0
    if n < 2:
        return []
    return [range(0 if r == 0 else r * t // n + d, (r + 1) * t // n + d) for r in range(n)]


def kept(settings: TimingSettings, r: int, samples: list[float]) -> list[float]:
    """A paired round's times without the discarded first call (round 0 only)."""
    return samples[1:] if r == 0 and settings.discard_first else samples
