"""Correctness, judged on the reference server, where no candidate code ever ran.

The candidate child wrote `<label>.out` (kb_eval/eval/wire/outputs.py: raw tensors behind a
checked header, no pickle) per checked call; the reference side computes the same call,
reads the candidate's file (no larger than a few times the reference's outputs) and
compares on the device. A trial passes when every output has the reference's shape and dtype,
NaN and ±Inf sit where the reference's do, and the finite values satisfy
|out - ref| <= atol + rtol * |ref|. Differences are computed in chunks (large outputs do
not triple the memory) and in float64. The parent gets one summary per label
(`Diff.as_dict`) and adds them up (`info_from_diffs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from kb_eval.eval.wire import outputs
from kb_eval.inputs import TOLERANCES
from kb_eval.results import CorrectnessInfo

CHUNK = 1 << 24  # elements per comparison step


def tolerances(precision: str, atol: float | None = None,
               rtol: float | None = None) -> tuple[float, float]:
    d_atol, d_rtol = TOLERANCES[precision]
    return (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)


def judge_file(path: Path, refs: list[torch.Tensor], atol: float, rtol: float,
               staging: outputs.Staging | None = None) -> dict:
    """Compare the candidate's file for one call with the reference's outputs of it
    (read through `staging`, a pinned buffer, when the reference is on a GPU)."""
    ref_bytes = sum(t.numel() * t.element_size() for t in refs)
    try:
        outs = outputs.read(path, 4 * ref_bytes + (1 << 20), staging)
        return compare_outputs(outs, refs, atol, rtol).as_dict()
    except outputs.OutputsUnreadable as e:
        return Diff(False, str(e)).as_dict()


@dataclass
class Diff:
    ok: bool
    error: str | None = None
    max_abs: float = 0.0
    sum_abs: float = 0.0
    count: int = 0
    max_rel: float = 0.0

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
    d = Diff(True)
    bad = nan_bad = inf_bad = 0
    for s in range(0, o.numel(), CHUNK):
        oc, rc = o[s:s + CHUNK].to(r.device).double(), r[s:s + CHUNK].double()
        on, rn = oc.isnan(), rc.isnan()
        nan_bad += int((on != rn).sum())
        oi, ri = oc.isinf(), rc.isinf()
        inf_bad += int(((oi | ri) & ~(on | rn) & (oc != rc)).sum())
        finite = oc.isfinite() & rc.isfinite()
        diff = (oc - rc).abs()[finite]
        if diff.numel():
            ra = rc.abs()[finite]
            bad += int((diff > atol + rtol * ra).sum())
            d.max_abs = max(d.max_abs, float(diff.max()))
            d.sum_abs += float(diff.sum())
            d.max_rel = max(d.max_rel, float((diff / ra.clamp_min(max(atol, 1e-12))).max()))
            d.count += diff.numel()
    problems = []
    if nan_bad:
        problems.append(f"NaN at {nan_bad} positions that differ from the reference's")
    if inf_bad:
        problems.append(f"Inf at {inf_bad} positions that differ from the reference's")
    if bad:
        problems.append(f"{bad}/{o.numel()} values beyond atol={atol:g} rtol={rtol:g} "
                        f"(max abs diff {d.max_abs:.3g})")
    if problems:
        d.ok, d.error = False, "; ".join(problems)
    return d


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], atol: float,
                    rtol: float) -> Diff:
    if len(outs) != len(refs):
        return Diff(False, f"{len(outs)} output tensor(s), expected {len(refs)}")
    total = Diff(True)
    for i, (o, r) in enumerate(zip(outs, refs)):
        d = compare_tensor(o, r, atol, rtol)
        if not d.ok:
            where = f"output {i}: " if len(refs) > 1 else ""
            return Diff(False, where + d.error, d.max_abs, d.sum_abs, d.count, d.max_rel)
        total.max_abs, total.max_rel = max(total.max_abs, d.max_abs), max(total.max_rel, d.max_rel)
        total.sum_abs, total.count = total.sum_abs + d.sum_abs, total.count + d.count
    return total


def _count_kind(info: CorrectnessInfo, label: str) -> None:
    """Say what `trials` is made of (wire/labels.py: correct_<i>, shape_0, timing_<i>_..)."""
    kind = str(label).partition("_")[0]
    if kind == "timing":
        info.rechecked_timed += 1
    elif kind == "shape":
        info.shape_probes += 1
    else:
        info.correct_trials += 1


def info_from_diffs(labels: list[str], diffs: dict[str, dict], atol: float,
                    rtol: float) -> CorrectnessInfo:
    """Add up the reference server's per-label comparisons (a label it has none for fails);
    the first few failures are kept as messages."""
    info = CorrectnessInfo(atol=atol, rtol=rtol)
    max_abs = max_rel = sum_abs = 0.0
    count = 0
    for label in labels:
        info.trials += 1
        _count_kind(info, label)
        d = diffs.get(label) or {"ok": False, "error": "not compared"}
        max_abs, max_rel = max(max_abs, d.get("max_abs", 0.0)), max(max_rel, d.get("max_rel", 0.0))
        sum_abs, count = sum_abs + d.get("sum_abs", 0.0), count + d.get("count", 0)
        if d.get("ok"):
            info.passed += 1
        elif len(info.failures) < 5:
            info.failures.append(f"{label}: {d.get('error')}")
    if count:
        info.max_abs_diff, info.mean_abs_diff, info.max_rel_diff = max_abs, sum_abs / count, max_rel
    return info
