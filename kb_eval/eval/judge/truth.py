"""Correctness against float64 truth (the default rule, `--tolerance f64`).

With `truth` the reference run in float64 on the same rounded inputs and E = |ref - truth|
the reference's own error, per output tensor over positions finite in ref and truth:

    elementwise  |out - truth| <= K * (E_i + S + u * (|truth_i| + M))
    normwise     ||out - truth|| <= K_NORM * (||E|| + u * ||truth||)

S, M: rms of E and truth over positions that carry a value (else M = `Truth.scale`); u: the
unit roundoff. NaN and Inf must sit where the reference's are. docs/GUARANTEES.md
"Correctness" has why and how K, K_NORM were chosen. `ratio`, `norm_ratio`: the errors
as a share of their bounds (<= 1 passes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

K = 256.0
K_NORM = 64.0
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24,
                 torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
CHUNK = 1 << 23  # elements per step: a few float64 temporaries of 64 MB each


class Truth(list):
    """A call's float64 outputs, and `scale`: the largest finite magnitude among the
    call's floating inputs and the reference's weights and buffers (0 unknown)."""

    def __init__(self, tensors, scale: float = 0.0):
        super().__init__(tensors)
        self.scale = scale


def computation_scale(inputs: list, model: torch.nn.Module) -> float:
    """Truth.scale of a call: one reduction per tensor, no copies; 0 when unknown."""
    tensors = [t for t in _leaves(inputs) if t.is_floating_point() and t.numel()]
    tensors += [t for t in (*model.parameters(), *model.buffers())
                if t.is_floating_point() and t.numel()]
    ends: dict[torch.device, list[torch.Tensor]] = {}
    try:
        for t in tensors:
            ends.setdefault(t.device, []).append(
                torch.stack(torch.aminmax(t.detach())).double().abs().max())
        return max((float(torch.stack(e).nan_to_num_(0.0, 0.0, 0.0).max())
                    for e in ends.values()), default=0.0)
    except (RuntimeError, NotImplementedError):  # a tensor kind without aminmax
        return 0.0


def _leaves(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _leaves(v)]
    return []


def within_rounding(excess: float, d2: float, r2: float, count: int, u: float) -> bool:
    """Whether an output this close to the reference's passes the float64 rule whatever
    the truth, so that the truth need not be computed. Over the n positions where out and
    ref are finite, with D = |out - ref|:

        D_i <= K * u * (|ref_i| + rms(ref))   (`excess` = max(D_i - K*u*|ref_i|) within
                                               K * u * sqrt(r2 / n))
        ||D|| <= K_NORM * u * ||ref||          (sqrt(d2) and sqrt(r2))

    Why, with E = |ref - truth|: |out - truth| <= D + E, and |truth| >= |ref| - E, so the
    elementwise bound K * (E + S + u * (|truth| + M)) is at least
    (K - K*u) * E + K*u*|ref| + K*S + K*u*M >= E + K*u*|ref| + K*u*rms(ref), since
    K*u <= 1 (every precision here) and M >= rms(ref) - S; and the normwise bound
    K_NORM * (||E|| + u*||truth||) >= ||E|| + K_NORM*u*||ref|| likewise. One assumption:
    the truth is finite wherever the reference is (float64 has the wider range). A TF32,
    fp16 or bf16 downgrade never lands within this and still faces the truth."""
    if not count:
        return True
    ku = K * u
    return excess <= ku * (r2 / count) ** 0.5 and d2 ** 0.5 <= K_NORM * u * r2 ** 0.5


def special_mismatches(oc: torch.Tensor, rc: torch.Tensor,
                       both_finite: torch.Tensor) -> tuple[int, int]:
    """Positions where NaN, or an infinity, differs between out and ref (float64 chunks);
    only those outside `both_finite` are looked at."""
    if bool(both_finite.all()):
        return 0, 0
    oc, rc = oc[~both_finite], rc[~both_finite]
    on, rn = oc.isnan(), rc.isnan()
    oi, ri = oc.isinf(), rc.isinf()
    return int((on != rn).sum()), int(((oi | ri) & ~(on | rn) & (oc != rc)).sum())


def special_messages(nan_bad: int, inf_bad: int) -> list[str]:
    return ([f"NaN at {nan_bad} positions that differ from the reference's"] * bool(nan_bad)
            + [f"Inf at {inf_bad} positions that differ from the reference's"] * bool(inf_bad))


def _flat(t: torch.Tensor) -> torch.Tensor:
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1)


def applies(ref: torch.Tensor, truth: torch.Tensor) -> bool:
    """Whether a tensor is judged against the truth: a floating (or complex) output whose
    float64 run gave the same shape. Integer and bool outputs stay exact (KernelBench)."""
    floating = (ref.dtype in UNIT_ROUNDOFF or ref.is_complex()) and (
        truth.is_floating_point() or truth.is_complex())
    return floating and tuple(ref.shape) == tuple(truth.shape)


# The loops zero the positions not counted (a boolean index copies and syncs) and work in
# place only on their own temporaries. On a GPU judge/fused.py does the same in one read.


def fused_for(r: torch.Tensor, *others: torch.Tensor):
    """judge/fused.py when it judges these tensors (on a GPU), else None."""
    if r.device.type != "cuda":
        return None
    from kb_eval.eval.judge import fused  # imports Triton: only where a GPU judges

    return fused if fused.enabled(r, *others) else None


def _scales(r: torch.Tensor, t: torch.Tensor) -> tuple[float, float, int]:
    """Sums of E^2 and truth^2 over positions finite in both, and the count of those that
    carry a value (the reference or the truth nonzero): S and M are rms over them."""
    fused = fused_for(r, t)
    return fused.scales(r, t, CHUNK) if fused else _scales_torch(r, t)


def _scales_torch(r: torch.Tensor, t: torch.Tensor) -> tuple[float, float, int]:
    e2 = t2 = torch.zeros((), dtype=torch.float64, device=r.device)
    n = torch.zeros((), dtype=torch.int64, device=r.device)
    for s in range(0, r.numel(), CHUNK):
        rc, tc = r[s:s + CHUNK].double(), t[s:s + CHUNK].to(r.device, torch.float64)
        fin = rc.isfinite() & tc.isfinite()
        e, tf = (rc - tc).masked_fill_(~fin, 0.0), tc.masked_fill(~fin, 0.0)
        valued = fin.logical_and_(rc.ne(0.0).logical_or_(tc.ne(0.0)))
        e2, t2, n = e2 + torch.dot(e, e), t2 + torch.dot(tf, tf), n + valued.sum()
    return float(e2), float(t2), int(n)


def compare_truth(out: torch.Tensor, ref: torch.Tensor, truth: torch.Tensor,
                  scale: float = 0.0) -> dict:
    """The float64 verdict on one output tensor (shape and dtype checked):
    {"ok", "error", "ratio", "norm_ratio"}. `scale`: Truth.scale."""
    u = UNIT_ROUNDOFF[{torch.complex64: torch.float32,
                       torch.complex128: torch.float64}.get(ref.dtype, ref.dtype)]
    o, r, t = _flat(out), _flat(ref), _flat(truth)
    e2, t2, n = _scales(r, t)
    s, m = (e2 / n) ** 0.5 if n else 0.0, (t2 / n) ** 0.5 if n else 0.0
    if not n:  # zeros everywhere: the computation's scale, over every position
        m, t2 = scale, scale * scale * r.numel()
    fused = fused_for(r, o, t)
    worst, c2, bad, nan_bad, inf_bad = (fused.truth_check(o, r, t, s, m, u, K, CHUNK) if fused
                                        else _check_torch(o, r, t, s, m, u))
    norm_bound = K_NORM * (e2 ** 0.5 + u * t2 ** 0.5)
    norm_ratio = c2 ** 0.5 / norm_bound if norm_bound > 0 else (0.0 if c2 == 0 else float("inf"))
    problems = special_messages(nan_bad, inf_bad)
    if bad:
        problems.append(f"{bad}/{o.numel()} values beyond {K:g}x the reference's own error "
                        f"against float64 (worst {worst:.3g}x the bound)")
    if norm_ratio > 1:
        problems.append(f"error norm {norm_ratio * K_NORM:.3g}x the reference's own "
                        f"(bound {K_NORM:g}x)")
    return {"ok": not problems, "error": "; ".join(problems) or None,
            "ratio": worst, "norm_ratio": norm_ratio}


def _check_torch(o: torch.Tensor, r: torch.Tensor, t: torch.Tensor, s: float, m: float,
                 u: float) -> tuple[float, float, int, int, int]:
    """The elementwise check of flat tensors given S and M: (worst share of the bound, sum
    of squared errors, count beyond the bound, NaN and Inf mismatches)."""
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    worst, c2, bad, nan_bad, inf_bad = zero, zero, zero.long(), 0, 0
    for i in range(0, o.numel(), CHUNK):
        oc, rc = o[i:i + CHUNK].to(r.device).double(), r[i:i + CHUNK].double()
        tc = t[i:i + CHUNK].to(r.device, torch.float64)
        both = oc.isfinite() & rc.isfinite()
        nb, ib = special_mismatches(oc, rc, both)
        nan_bad, inf_bad = nan_bad + nb, inf_bad + ib
        out_of_count = ~both.logical_and_(tc.isfinite())
        err = (oc - tc).abs_().masked_fill_(out_of_count, 0.0)
        c2 = c2 + torch.dot(err, err)
        # K * (|ref - truth| + S + u * (|truth| + M)), in place on fresh temporaries
        bound = (rc - tc).abs_().add_(s).add_(tc.abs().add_(m).mul_(u)).mul_(K)
        share = err.div_(bound.clamp_min_(torch.finfo(torch.float64).tiny))
        share.masked_fill_(out_of_count, 0.0)
        bad = bad + (share > 1).sum()
        worst = torch.maximum(worst, share.max())
    return float(worst), float(c2), int(bad), nan_bad, inf_bad


def compare_outputs_truth(outs: list[torch.Tensor], refs: list[torch.Tensor],
                          truths: list[torch.Tensor], exact_ok: Callable[[int], bool]) -> dict:
    """The float64 verdict on one call; an output the truth does not apply to (integer,
    bool) keeps its KernelBench verdict `exact_ok(i)`."""
    worst = norm = 0.0
    for i, (o, r, t) in enumerate(zip(outs, refs, truths)):
        where = f"output {i}: " if len(refs) > 1 else ""
        if not applies(r, t):
            if not exact_ok(i):
                return {"ok": False, "error": where + "differs from the reference"}
            continue
        d = compare_truth(o, r, t, getattr(truths, "scale", 0.0))
        if not d["ok"]:
            return {**d, "error": where + d["error"]}
        worst, norm = max(worst, d["ratio"]), max(norm, d["norm_ratio"])
    return {"ok": True, "error": None, "ratio": worst, "norm_ratio": norm}
