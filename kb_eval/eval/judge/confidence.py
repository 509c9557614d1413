"""A 95 % confidence interval for a sample's speedup, and the scores that use it.

A speedup is baseline median / candidate median, two noisy figures: a copy of the reference
measured 0.95-1.15 on the H100, so `speedup > 1` alone is a coin flip near parity. Each
timing keeps the medians of up to 20 consecutive rounds of its calls (TimingStats.rounds),
so drift within a run (clocks, the allocator, the machine's other work) shows up as spread
between rounds rather than being averaged away. The interval is a percentile bootstrap
over rounds: both sides' rounds resampled with replacement, the ratio of their medians,
4000 times; seeded from the figures themselves, so a record's interval is reproducible.

Timings without rounds (baseline files written before they existed) get a normal
approximation on the log scale: the standard error of a median, 1.2533 * sigma / sqrt(n),
with sigma = IQR / 1.349 (robust to outliers). Fewer than 3 rounds (or calls) on a side:
no interval, and the sample cannot count as significantly fast.

`fast_p_sig` counts a sample only when its interval's lower end is above p: a copy of the
reference (interval around 1.0) never counts in fast_1_sig.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from kb_eval.timing import TimingStats

LEVEL = 0.95
RESAMPLES = 4000
MIN_ROUNDS = 3
Z = 1.959964  # two-sided 95 % of a normal


def _seed(*xs: list[float]) -> int:
    return int.from_bytes(hashlib.sha256(repr(xs).encode()).digest()[:8], "little")


def bootstrap_interval(base_rounds: list[float], cand_rounds: list[float],
                       level: float = LEVEL, resamples: int = RESAMPLES) -> tuple[float, float]:
    """Percentile interval of median(base*) / median(cand*) over resampled rounds."""
    rng = np.random.default_rng(_seed(base_rounds, cand_rounds))
    b, c = np.asarray(base_rounds, float), np.asarray(cand_rounds, float)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    mc = np.median(c[rng.integers(0, c.size, (resamples, c.size))], axis=1)
    ratios = mb / mc
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def _relative_se(t: TimingStats) -> float:
    sigma = (t.p75 - t.p25) / 1.349
    return 1.2533 * sigma / math.sqrt(t.n) / t.median


def normal_interval(base: TimingStats, cand: TimingStats) -> tuple[float, float]:
    """From the summaries alone: log speedup +- z * sqrt(se_b^2 + se_c^2) (relative)."""
    s = base.median / cand.median
    half = Z * math.hypot(_relative_se(base), _relative_se(cand))
    return s * math.exp(-half), s * math.exp(half)


def speedup_interval(base: TimingStats | None,
                     cand: TimingStats | None) -> tuple[list[float], str] | None:
    """([lo, hi], method) for baseline / candidate, or None when it cannot be had."""
    if base is None or cand is None or base.median <= 0 or cand.median <= 0:
        return None
    if (base.rounds and cand.rounds and len(base.rounds) >= MIN_ROUNDS
            and len(cand.rounds) >= MIN_ROUNDS and min(base.rounds + cand.rounds) > 0):
        lo, hi = bootstrap_interval(base.rounds, cand.rounds)
        return [lo, hi], "bootstrap_rounds"
    if base.n >= MIN_ROUNDS and cand.n >= MIN_ROUNDS:
        lo, hi = normal_interval(base, cand)
        return [lo, hi], "normal_iqr"
    return None
