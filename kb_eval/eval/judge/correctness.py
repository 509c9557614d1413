"""Correctness, judged on the reference server, where no candidate code ever ran.

The server reads the candidate's `<label>.out` (wire/outputs.py) and gives two verdicts
per label: KernelBench's (`ok`: shape, dtype, NaN/Inf where the reference's are,
|out - ref| <= atol + rtol * |ref|) and float64 truth's (`f64`, judge/truth.py). The rule
asked for decides (`info_from_diffs`); the other is recorded beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from kb_eval.eval.judge.truth import (K, K_NORM, UNIT_ROUNDOFF, compare_outputs_truth,
                                     fused_for, special_messages, special_mismatches,
                                     within_rounding)
from kb_eval.eval.wire import outputs
from kb_eval.inputs import TOLERANCES
from kb_eval.results import CorrectnessInfo

CHUNK = 1 << 24  # elements per comparison step


def tolerances(precision: str, atol: float | None = None,
               rtol: float | None = None) -> tuple[float, float]:
    d_atol, d_rtol = TOLERANCES[precision]
    return (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)


RULES = ("f64", "kernelbench")


def resolve_tolerance(precision: str, atol: float | None, rtol: float | None, rule: str,
                      own: object = None) -> dict:
    """The tolerance a problem is judged with: the flags' atol/rtol, else the problem's
    `KB_TOLERANCE` (any of atol, rtol, rule), else the precision's defaults. A malformed
    KB_TOLERANCE raises ValueError."""
    own = {} if own is None else own
    if not isinstance(own, dict) or set(own) - {"atol", "rtol", "rule"}:
        raise ValueError(f"KB_TOLERANCE must be a dict with keys atol, rtol, rule; got {own!r}")
    for key in ("atol", "rtol"):
        v = own.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"KB_TOLERANCE[{key!r}] must be a number >= 0, got {v!r}")
    if own.get("rule", rule) not in RULES:
        raise ValueError(f"KB_TOLERANCE['rule'] must be one of {RULES}, got {own['rule']!r}")
    d_atol, d_rtol = TOLERANCES[precision]
    source = "flag" if atol is not None or rtol is not None else (
        "problem" if own else "default")
    if atol is None and rtol is None:
        atol, rtol = own.get("atol"), own.get("rtol")
    return {"atol": float(d_atol if atol is None else atol),
            "rtol": float(d_rtol if rtol is None else rtol),
            "rule": own.get("rule", rule), "source": source}


def judge_file(path: Path, refs: list[torch.Tensor], atol: float, rtol: float,
               staging: outputs.Staging | None = None,
               truths: list[torch.Tensor] | Callable[[], list | str] | None = None,
               slots: list[torch.Tensor] | None = None) -> dict:
    """Compare the candidate's file for one call with the reference's outputs, and with
    their float64 truth when given (`f64`). A callable `truths` (a list, or why none) is
    called only when the outputs are not truth.within_rounding of the reference's."""
    ref_bytes = sum(t.numel() * t.element_size() for t in refs)
    try:
        outs = outputs.read(path, 4 * ref_bytes + (1 << 20), staging, slots)
    except outputs.OutputsUnreadable as e:
        d = Diff(False, str(e)).as_dict()
        return {**d, "f64": {"ok": False, "error": d["error"]}} if truths is not None else d
    d = compare_outputs(outs, refs, atol, rtol).as_dict()
    if truths is None:
        return d
    if callable(truths):
        if d["within_rounding"]:
            how = "identical" if d["max_abs"] == 0.0 else "within_rounding"
            d["f64"] = {"ok": True, "error": None, "ratio": None, "norm_ratio": None,
                        how: True}
            return d
        truths = truths()
        if isinstance(truths, str):  # the reference does not run in float64
            d["f64_skipped"] = truths
            return d
    shape_error = _structure_error(outs, refs)
    if shape_error:
        d["f64"] = {"ok": False, "error": shape_error}
    else:
        d["f64"] = compare_outputs_truth(
            outs, refs, truths, lambda i: compare_tensor(outs[i], refs[i], atol, rtol).ok)
    return d


def _structure_error(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> str | None:
    if len(outs) != len(refs):
        return f"{len(outs)} output tensor(s), expected {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape or o.dtype != r.dtype:
            return (f"output {i}: " if len(refs) > 1 else "") + (
                f"shape {tuple(o.shape)} != expected {tuple(r.shape)}" if o.shape != r.shape
                else f"dtype {o.dtype} != expected {r.dtype}")
    return None


@dataclass
class Diff:
    ok: bool
    error: str | None = None
    max_abs: float = 0.0
    sum_abs: float = 0.0
    count: int = 0
    max_rel: float = 0.0
    # passes the float64 rule whatever the truth: a lazy truth is never computed
    within_rounding: bool = False

    def as_dict(self) -> dict:
        return dict(vars(self))


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> Diff:
    if out.shape != ref.shape:
        return Diff(False, f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Diff(False, f"dtype {out.dtype} != expected {ref.dtype}")
    if out.is_complex():
        out, ref = torch.view_as_real(out), torch.view_as_real(ref)
    o, r = out.reshape(-1), ref.reshape(-1)
    u = UNIT_ROUNDOFF.get(r.dtype)
    st = kb_stats(o, r, atol, rtol, K * u if u else 0.0)
    d = Diff(True, None, st.max_abs, st.sum_abs, st.count, st.max_rel)
    # An integer or bool output has no rounding: the truth rule keeps KernelBench's for it
    d.within_rounding = (within_rounding(st.excess, st.d2, st.r2, st.count, u) if u
                         else not st.bad) and not (st.nan_bad or st.inf_bad)
    problems = special_messages(st.nan_bad, st.inf_bad)
    if st.bad:
        problems.append(f"{st.bad}/{o.numel()} values beyond atol={atol:g} rtol={rtol:g} "
                        f"(max abs diff {d.max_abs:.3g})")
    if problems:
        d.ok, d.error = False, "; ".join(problems)
    return d


class KbStats(NamedTuple):
    """One pass of flat `o` against `r`: KernelBench's rule, then truth.within_rounding's."""
    max_abs: float
    sum_abs: float
    count: int  # positions finite in both
    max_rel: float
    bad: int  # beyond atol + rtol * |r|
    nan_bad: int  # NaN, and an infinity, where the reference has none
    inf_bad: int
    excess: float  # the largest |o - r| - ku * |r|, at least 0
    d2: float  # the sum of (o - r)^2
    r2: float  # the sum of r^2


def kb_stats(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float,
             ku: float = 0.0) -> KbStats:
    """KbStats of flat `o` against `r` (fused kernels on a GPU)."""
    fused = fused_for(r, o)
    if fused:
        return KbStats(*fused.kb_stats(o, r, atol, rtol, CHUNK, ku))
    return kb_stats_torch(o, r, atol, rtol, ku)


def kb_stats_torch(o: torch.Tensor, r: torch.Tensor, atol: float, rtol: float,
                   ku: float = 0.0) -> KbStats:
    """kb_stats in torch, chunk by chunk in float64."""
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    max_abs, sum_abs, max_rel, excess, d2, r2 = zero, zero, zero, zero, zero, zero
    bad, count, nan_bad, inf_bad = zero.long(), zero.long(), 0, 0
    for s in range(0, o.numel(), CHUNK):
        oc, rc = o[s:s + CHUNK].to(r.device).double(), r[s:s + CHUNK].double()
        finite = oc.isfinite() & rc.isfinite()
        nb, ib = special_mismatches(oc, rc, finite)
        nan_bad, inf_bad = nan_bad + nb, inf_bad + ib
        out_of_count = ~finite
        diff = (oc - rc).abs_().masked_fill_(out_of_count, 0.0)
        ra = rc.abs().masked_fill_(out_of_count, 0.0)
        bad = bad + (diff > ra.mul(rtol).add_(atol)).sum()
        max_abs, sum_abs = torch.maximum(max_abs, diff.max()), sum_abs + diff.sum()
        excess = torch.maximum(excess, (diff - ra * ku).max())
        d2, r2 = d2 + torch.dot(diff, diff), r2 + torch.dot(ra, ra)
        rel = diff.div(ra.clamp_min_(max(atol, 1e-12))).masked_fill_(out_of_count, 0.0)
        max_rel, count = torch.maximum(max_rel, rel.max()), count + finite.sum()
    return KbStats(float(max_abs), float(sum_abs), int(count), float(max_rel), int(bad),
                   nan_bad, inf_bad, float(excess), float(d2), float(r2))


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], atol: float,
                    rtol: float) -> Diff:
    if len(outs) != len(refs):
        return Diff(False, f"{len(outs)} output tensor(s), expected {len(refs)}")
    total, failed = Diff(True, within_rounding=True), None
    for i, (o, r) in enumerate(zip(outs, refs)):
        d = compare_tensor(o, r, atol, rtol)
        # kept when KernelBench's rule fails too: the float64 rule may still pass
        total.within_rounding &= d.within_rounding
        if not d.ok:
            if failed is None:
                where = f"output {i}: " if len(refs) > 1 else ""
                failed = Diff(False, where + d.error, d.max_abs, d.sum_abs, d.count, d.max_rel)
            continue
        total.max_abs, total.max_rel = max(total.max_abs, d.max_abs), max(total.max_rel, d.max_rel)
        total.sum_abs, total.count = total.sum_abs + d.sum_abs, total.count + d.count
    if failed is not None:
        failed.within_rounding = total.within_rounding
        return failed
    return total


def _count_kind(info: CorrectnessInfo, label: str) -> None:
    """Count `label` by kind (wire/labels.py)."""
    kind = str(label).partition("_")[0]
    if kind == "timing":
        info.rechecked_timed += 1
    elif kind == "shape":
        info.shape_probes += 1
    else:
        info.correct_trials += 1


def info_from_diffs(labels: list[str], diffs: dict[str, dict], atol: float, rtol: float,
                    rule: str = "kernelbench", fallback: str | None = None) -> CorrectnessInfo:
    """Add up the server's per-label comparisons (a missing one fails) under both rules.
    `rule` decides when it can: f64 needs a float64 verdict for every label, else
    KernelBench's decides and `fallback` says why."""
    info = CorrectnessInfo(atol=atol, rtol=rtol)
    max_abs = max_rel = sum_abs = 0.0
    count = kb_passed = f64_passed = 0
    kb_fail, f64_fail, ratios, norms = [], [], [0.0], [0.0]
    for label in labels:
        info.trials += 1
        _count_kind(info, label)
        d = diffs.get(label) or {"ok": False, "error": "not compared",
                                 "f64": {"ok": False, "error": "not compared"}}
        max_abs, max_rel = max(max_abs, d.get("max_abs", 0.0)), max(max_rel, d.get("max_rel", 0.0))
        sum_abs, count = sum_abs + d.get("sum_abs", 0.0), count + d.get("count", 0)
        kb_passed += bool(d.get("ok"))
        if not d.get("ok"):
            kb_fail.append(f"{label}: {d.get('error')}")
        t = d.get("f64")
        if not isinstance(t, dict):
            fallback = fallback or d.get("f64_skipped") or "no float64 truth for " + label
            continue
        f64_passed += bool(t.get("ok"))
        ratios.append(float(t.get("ratio") or 0.0))
        norms.append(float(t.get("norm_ratio") or 0.0))
        if not t.get("ok"):
            f64_fail.append(f"{label}: {t.get('error')}")
    if count:
        info.max_abs_diff, info.mean_abs_diff, info.max_rel_diff = max_abs, sum_abs / count, max_rel
    have_f64 = fallback is None and info.trials > 0
    info.verdicts = {"kernelbench": kb_passed == info.trials > 0,
                     "f64": f64_passed == info.trials if have_f64 else None}
    if have_f64:
        info.f64_ratio, info.f64_norm_ratio = max(ratios), max(norms)
        info.f64_bound = {"k": K, "k_norm": K_NORM}
    info.rule = "f64" if rule == "f64" and have_f64 else "kernelbench"
    info.fallback = fallback if rule == "f64" and not have_f64 else None
    info.passed = f64_passed if info.rule == "f64" else kb_passed
    info.failures = (f64_fail if info.rule == "f64" else kb_fail)[:5]
    return info
