"""Speed of light: a correct sample's share of the machine's measured peaks (the larger of
FLOP/s over the matmul peak and bytes/s over DRAM bandwidth), and `above_speed_of_light`:
with L2 flushed, bytes moved faster than measured bandwidth void the speedup. FLOPs are
never a floor (an algebraic shortcut is legitimate).
"""

from __future__ import annotations

from kb_eval.results import Flag, SampleRecord
from kb_eval.work import ProblemWork, SolShare, larger, shares

SOL_LIMIT = 1.0  # a share of DRAM bandwidth above this was not measured honestly
FLAG = "above_speed_of_light"


def sol_share(work: ProblemWork, peaks, precision: str, median_ms: float | None,
              reference_ms: float | None) -> SolShare | None:
    """The shares of a call of `median_ms` and of the reference's (`peaks`: a PeaksFile)."""
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
    """Bytes not in a flushed L2: inputs, weights, outputs beyond what L2 absorbs."""
    reads = (work.in_bytes or 0) + (work.weight_bytes or 0)
    return reads + max(0, (work.out_bytes or 0) - (l2_bytes or 0))


def light_flags(work: ProblemWork, peaks, median_ms: float | None,
                flushed: bool) -> list[Flag]:
    """`above_speed_of_light` when must_bytes over the median exceed the measured bandwidth
    (only with L2 flushed: elsewhere no byte is known to come from DRAM)."""
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
    """The record's work and, for a correct one, its sol and flag, from the server's metrics."""
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
