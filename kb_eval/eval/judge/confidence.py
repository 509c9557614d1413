"""A 95 % confidence interval for a sample's speedup: `speedup > 1` alone is a coin flip
near parity. Paired rounds bootstrap the median per-round ratio; unpaired, the ratio of
round medians, or a log-normal from the IQR. Seeded from the figures (reproducible), then
widened by `resolution`.
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
# Widening on each side: what timing the same code twice may differ by unseen by resampling
# (layout, caches); without it a few of 100 reference copies land above 1.0.
RESOLUTION = 0.03
# more for a launch-bound call: two processes launch at different speeds, unseen by pairing
HOST_RESOLUTION = 0.06


def widened(lo: float, hi: float, resolution: float = RESOLUTION) -> list[float]:
    return [lo / (1 + resolution), hi * (1 + resolution)]


def resolution(*timings: TimingStats | None) -> float:
    """RESOLUTION plus HOST_RESOLUTION times the larger launch share of either side."""
    shares = [t.launch_share for t in timings if t is not None and t.launch_share is not None]
    return RESOLUTION + HOST_RESOLUTION * max(shares, default=0.0)


def _seed(*xs: list[float]) -> int:
    return int.from_bytes(hashlib.sha256(repr(xs).encode()).digest()[:8], "little")


def bootstrap_interval(base_rounds: list[float], cand_rounds: list[float],
                       level: float = LEVEL, resamples: int = RESAMPLES) -> tuple[float, float]:
    """Percentile interval of median(base*) / median(cand*) over resampled rounds."""
    rng = np.random.default_rng(_seed(base_rounds, cand_rounds))
    b, c = np.asarray(base_rounds, float), np.asarray(cand_rounds, float)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    mc = np.median(c[rng.integers(0, c.size, (resamples, c.size))], axis=1)
    return _percentile_interval(mb / mc, level)


def _percentile_interval(ratios: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_interval(base_rounds: list[float], cand_rounds: list[float],
                    level: float = LEVEL, resamples: int = RESAMPLES) -> tuple[float, float]:
    """Percentile interval of the median per-round ratio base_i / cand_i, rounds resampled."""
    rng = np.random.default_rng(_seed(base_rounds, cand_rounds))
    r = np.asarray(base_rounds, float) / np.asarray(cand_rounds, float)
    return _percentile_interval(
        np.median(r[rng.integers(0, r.size, (resamples, r.size))], axis=1), level)


def paired_speedup(base_rounds: list[float], cand_rounds: list[float]) -> float:
    """The paired point estimate: the median of the per-round ratios."""
    return float(np.median(np.asarray(base_rounds, float) / np.asarray(cand_rounds, float)))


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
        return (widened(*bootstrap_interval(base.rounds, cand.rounds), resolution(base, cand)),
                "bootstrap_rounds")
    if base.n >= MIN_ROUNDS and cand.n >= MIN_ROUNDS:
        return widened(*normal_interval(base, cand), resolution(base, cand)), "normal_iqr"
    return None
