"""Speed of light: a correct sample's share of the machine's measured peaks, and the rule
that a time the memory could not have delivered is never a win.

The share (kb_eval/work.py `SolShare`) is the larger of achieved FLOP/s over the matmul
peak and compulsory bytes/s over the DRAM bandwidth; the reference's share stands beside.

`above_speed_of_light` follows rules.physical_floor: FLOPs are never a floor (an algebraic
shortcut is legitimate), bytes are. On a GPU with L2 flushed, the bytes a call must move
from DRAM at more than the measured bandwidth flag the sample (correct, speedup not
counted); on a CPU such a share is only reported. A share above 1 never counts in sol_p.
"""

from __future__ import annotations

from kb_eval.results import Flag, SampleRecord
from kb_eval.work import ProblemWork, SolShare, larger, shares

SOL_LIMIT = 1.0  # a share of DRAM bandwidth above this was not measured honestly
FLAG = "above_speed_of_light"


def sol_share(work: ProblemWork, peaks, precision: str, median_ms: float | None,
              reference_ms: float | None) -> SolShare | None:
    """The shares of a call of `median_ms` and of the reference's `reference_ms`
    (`peaks`: a kb_eval.peaks.PeaksFile)."""
    if not median_ms or median_ms <= 0 or work.bytes is None:
        return None
    peak, bw = peaks.matmul_peak(precision), peaks.bandwidth
    flop, byte = shares(work, median_ms / 1e3, peak, bw)
    share = larger(flop, byte)
    ref_flop, ref_byte = shares(work, (reference_ms or 0) / 1e3, peak, bw)
    return SolShare(
        flops_per_s=work.flops / (median_ms / 1e3) if work.flops is not None else None,
        bytes_per_s=work.bytes / (median_ms / 1e3), flop_share=flop, byte_share=byte,
        share=share, bound=None if share is None else
        ("compute" if flop is not None and flop >= (byte or 0) else "memory"),
        reference_share=larger(ref_flop, ref_byte), reference_flop_share=ref_flop,
        reference_byte_share=ref_byte, peak=precision if peak else None,
        peak_flops_per_s=peak, bandwidth_bytes_per_s=bw)


def must_bytes(work: ProblemWork, l2_bytes: int | None) -> int:
    """The bytes a call cannot have found in L2 once it was flushed: inputs, weights, and
    the outputs beyond what L2 absorbs."""
    reads = (work.in_bytes or 0) + (work.weight_bytes or 0)
    return reads + max(0, (work.out_bytes or 0) - (l2_bytes or 0))


def light_flags(work: ProblemWork, peaks, median_ms: float | None,
                flushed: bool) -> list[Flag]:
    """`above_speed_of_light` when the call's must-move bytes over its median exceed the
    measured bandwidth; only where L2 was flushed before each call (elsewhere no byte is
    known to come from DRAM)."""
    bw = peaks.bandwidth
    if not flushed or not median_ms or median_ms <= 0 or not bw or work.bytes is None:
        return []
    must = must_bytes(work, peaks.cache_bytes)
    share = must / (median_ms / 1e3) / bw
    if share <= SOL_LIMIT:
        return []
    return [Flag(code=FLAG, severity="warning",
                 message=f"median {median_ms:.3g} ms moves {must} bytes from DRAM at "
                         f"{share:.0%} of the measured bandwidth ({bw / 1e9:.1f} GB/s): "
                         f"above the speed of light, speedup not counted")]


def judge_sol(record: SampleRecord, metrics: dict | None, precision: str,
              flushed: bool) -> None:
    """The record's work (every judged sample) and, for a correct one, its sol and the
    speed-of-light flag, from the reference server's metrics (`work`, `peaks`)."""
    from kb_eval.peaks import PeaksFile

    metrics = metrics or {}
    if isinstance(metrics.get("work"), dict):
        record.work = ProblemWork.model_validate(metrics["work"])
    if (record.work is None or not record.correct or record.timing is None
            or not isinstance(metrics.get("peaks"), dict)):
        return
    peaks = PeaksFile.model_validate(metrics["peaks"])
    ref_ms = record.baseline.median if record.baseline else None
    record.sol = sol_share(record.work, peaks, precision, record.timing.median, ref_ms)
    record.flags.extend(light_flags(record.work, peaks, record.timing.median, flushed))
