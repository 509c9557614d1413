"""Scores of a run: pure functions of the sample records and of what was asked.

Each asked problem weighs the same (one none of whose samples could be judged is left out,
in `excluded_problems`); a missing sample fails. fast_p is KernelBench's (correct AND
speedup > p), fast_p_sig needs the 95 % interval above p, sol_p counts shares of the speed
of light. pass@k: the unbiased estimator of Chen et al. (2021), as a product.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

from kb_eval.results import HARNESS_STATUSES, RunSummary, SampleRecord, level_of

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
SOL_P = (0.1, 0.25, 0.5, 0.75, 0.9)  # shares of the speed of light (judge/sol.py)
PASS_K = (1, 5, 10)


def fast_p_name(p: float) -> str:
    return f"fast_{p:g}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c correct) is correct."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n} c={c}")
    if k > n:
        raise ValueError(f"k={k} > n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def geometric_mean(values: Iterable[float]) -> float | None:
    xs = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not xs:
        return None
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


def is_correct(r: SampleRecord) -> bool:
    return bool(r.correct) and not any(f.severity == "error" for f in r.flags)


# Warnings that leave a sample correct but its speedup uncounted (docs/GUARANTEES.md).
VOIDS_SPEEDUP = frozenset({"no_custom_kernel", "constant_reference", "above_speed_of_light"})


def sol_p_name(p: float) -> str:
    return f"sol_{p:g}"


def counted_sol(r: SampleRecord) -> float | None:
    """The speed-of-light share the score counts: a counted speedup's, at most 1."""
    share = r.sol.share if r.sol is not None else None
    if (share is None or share > 1.0 or not is_correct(r)
            or any(f.code in VOIDS_SPEEDUP for f in r.flags)):
        return None
    return share


def is_sol(r: SampleRecord, p: float) -> bool:
    s = counted_sol(r)
    return s is not None and s >= p


def counted_speedup(r: SampleRecord) -> float | None:
    """The speedup the score counts: a correct sample's, unless a flag voids it."""
    if not is_correct(r) or r.speedup is None or any(f.code in VOIDS_SPEEDUP for f in r.flags):
        return None
    return r.speedup


def is_fast(r: SampleRecord, p: float) -> bool:
    s = counted_speedup(r)
    return s is not None and s > p


def is_fast_sig(r: SampleRecord, p: float) -> bool:
    """Faster than p beyond doubt: counted, and the 95 % interval's lower end above p."""
    return counted_speedup(r) is not None and bool(r.speedup_ci) and r.speedup_ci[0] > p


def _by_problem(records: Iterable[SampleRecord],
                asked: Iterable[str]) -> dict[str, list[SampleRecord]]:
    """The asked problems' records, the last turn of each (key, sample)."""
    latest: dict[tuple[str, int], SampleRecord] = {}
    for r in records:
        slot = (r.key, r.sample)
        if slot not in latest or r.turn >= latest[slot].turn:
            latest[slot] = r
    grouped: dict[str, list[SampleRecord]] = {k: [] for k in asked}
    for (key, _), r in latest.items():
        if key in grouped:
            grouped[key].append(r)
    return grouped


def summarize(records: Iterable[SampleRecord], problems_asked: Iterable[str],
              samples_per_problem: int = 1, fast_ps: Iterable[float] = FAST_P,
              ks: Iterable[int] = PASS_K, sol_ps: Iterable[float] = SOL_P) -> RunSummary:
    records = list(records)
    grouped = _by_problem(records, list(dict.fromkeys(problems_asked)))
    harness = [r for rs in grouped.values() for r in rs if r.status in HARNESS_STATUSES]
    # a problem none of whose samples was judged says nothing of the candidate
    excluded = [k for k, rs in grouped.items()
                if rs and all(r.status in HARNESS_STATUSES for r in rs)]
    grouped = {k: rs for k, rs in grouped.items() if k not in excluded}
    n_problems = len(grouped)
    n_of = {k: max(samples_per_problem, len(rs)) for k, rs in grouped.items()}

    def rate(pred) -> float:
        if not n_problems:
            return 0.0
        return sum(sum(map(pred, rs)) / n_of[k] for k, rs in grouped.items()) / n_problems

    recorded = [r for rs in grouped.values() for r in rs]
    correct = [r for r in recorded if is_correct(r)]
    pass_k = {}
    for k in ks:
        if n_problems and all(k <= n for n in n_of.values()):
            pass_k[f"pass@{k}"] = sum(
                pass_at_k(n_of[key], sum(map(is_correct, rs)), k)
                for key, rs in grouped.items()) / n_problems
    return RunSummary(
        problems=n_problems,
        samples_per_problem=samples_per_problem,
        samples=sum(len(rs) for rs in grouped.values()),
        compiled_rate=(sum(bool(r.compiled) for r in recorded) / len(recorded)
                       if recorded else 0.0),
        correct_rate=rate(is_correct),
        fast_p={fast_p_name(p): rate(lambda r, p=p: is_fast(r, p)) for p in fast_ps},
        fast_p_sig={fast_p_name(p): rate(lambda r, p=p: is_fast_sig(r, p)) for p in fast_ps},
        # no shares at all (no peaks): "-", not 0 %
        sol_p={sol_p_name(p): rate(lambda r, p=p: is_sol(r, p)) for p in sol_ps}
        if any(r.sol is not None for rs in grouped.values() for r in rs) else {},
        geomean_speedup=geometric_mean(counted_speedup(r) for r in correct),
        geomean_vs_baseline=geometric_mean(r.speedup_vs_baseline for r in correct
                                           if counted_speedup(r) is not None),
        pass_at_k=pass_k,
        status_counts=dict(Counter(r.status for rs in grouped.values() for r in rs)
                           + Counter(r.status for r in harness)),
        eval_errors=len(harness),
        excluded_problems=excluded,
        note=(f"{len(excluded)} problem(s) left out of every rate: the evaluator could not "
              f"judge any of their samples ({', '.join(sorted({r.status for r in harness}))})"
              if excluded else None),
    )


def summarize_levels(records: Iterable[SampleRecord], problems_asked: Iterable[str],
                     samples_per_problem: int = 1) -> RunSummary:
    """summarize(), with `levels` filled: the same figures over each level's problems."""
    records, asked = list(records), list(dict.fromkeys(problems_asked))
    summary = summarize(records, asked, samples_per_problem)
    for level in sorted({level_of(k) for k in asked}):
        keys = [k for k in asked if level_of(k) == level]
        summary.levels[f"level{level}"] = summarize(
            [r for r in records if level_of(r.key) == level], keys, samples_per_problem)
    return summary
