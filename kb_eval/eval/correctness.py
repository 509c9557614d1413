"""Correctness, judged in the parent, where no candidate code ever ran.

The candidate child and the reference child each saved `<label>.pt` (a list of CPU
tensors); the device lane read their bytes (the reference's checked against its child's
sha256). Both are loaded with `weights_only=True` (no pickled code) and must be lists of
exact `torch.Tensor`. A trial passes when every output has the reference's shape and dtype,
NaN and ±Inf sit where the reference's do, and the finite values satisfy
|out - ref| <= atol + rtol * |ref|. Differences are computed in chunks (large outputs do
not triple the parent's memory) and in float64.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import torch

from kb_eval.inputs import TOLERANCES
from kb_eval.results import CorrectnessInfo

CHUNK = 1 << 24  # elements per comparison step


class OutputsUnreadable(Exception):
    pass


def tolerances(precision: str, atol: float | None = None,
               rtol: float | None = None) -> tuple[float, float]:
    d_atol, d_rtol = TOLERANCES[precision]
    return (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)


def load_outputs(data: bytes | str | None, name: str) -> list[torch.Tensor]:
    """Outputs from a saved file's bytes (a str: why there are none; None: not written)."""
    if data is None:
        raise OutputsUnreadable(f"{name} was not written")
    if isinstance(data, str):
        raise OutputsUnreadable(f"{name} {data}")
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - anything unreadable is the writer's fault
        raise OutputsUnreadable(f"{name} is unreadable: {type(e).__name__}: "
                                f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
    if type(obj) is not list or not all(type(t) is torch.Tensor for t in obj):
        raise OutputsUnreadable(f"{name} does not hold a list of plain tensors")
    return obj


def read_outputs(folder: Path, labels: list[str], max_bytes: int) -> dict[str, bytes | str | None]:
    """A candidate's output files as bytes; None when missing, a reason when refused (a
    link, or larger than max_bytes: a child must not make the parent read any size)."""
    out: dict[str, bytes | str | None] = {}
    for label in labels:
        path = Path(folder) / f"{label}.pt"
        try:
            if path.is_symlink() or not path.is_file():
                out[label] = "is not a plain file" if path.exists() or path.is_symlink() else None
            elif (size := path.stat().st_size) > max_bytes:
                out[label] = f"is {size} bytes, far more than the reference's outputs"
            else:
                out[label] = path.read_bytes()
        except OSError as e:
            out[label] = f"is unreadable ({e.strerror})"
    return out


@dataclass
class Diff:
    ok: bool
    error: str | None = None
    max_abs: float = 0.0
    sum_abs: float = 0.0
    count: int = 0
    max_rel: float = 0.0


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
        oc, rc = o[s:s + CHUNK].double(), r[s:s + CHUNK].double()
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


def check_labels(labels: list[str], candidate: dict[str, bytes | str | None],
                 reference: dict[str, bytes], atol: float, rtol: float) -> CorrectnessInfo:
    """Compare every label's outputs (given as file bytes); the first few failures are
    kept as messages."""
    info = CorrectnessInfo(atol=atol, rtol=rtol)
    max_abs = max_rel = sum_abs = 0.0
    count = 0
    for label in labels:
        info.trials += 1
        refs = load_outputs(reference[label], f"reference {label}.pt")
        try:
            d = compare_outputs(load_outputs(candidate.get(label), f"{label}.pt"), refs,
                                atol, rtol)
        except OutputsUnreadable as e:
            d = Diff(False, str(e))
        max_abs, max_rel = max(max_abs, d.max_abs), max(max_rel, d.max_rel)
        sum_abs, count = sum_abs + d.sum_abs, count + d.count
        if d.ok:
            info.passed += 1
        elif len(info.failures) < 5:
            info.failures.append(f"{label}: {d.error}")
    if count:
        info.max_abs_diff, info.mean_abs_diff, info.max_rel_diff = max_abs, sum_abs / count, max_rel
    return info
