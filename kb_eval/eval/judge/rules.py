"""Parent-side rules beyond matching numbers, each returning `Flag`s for a sample: the
child's tripwires, complete re-checks, plausible timing, the physical floor, a constant
reference, the shape probe. score.VOIDS_SPEEDUP lists the warnings that void a speedup.
"""

from __future__ import annotations

import math

from kb_eval.results import Flag

# Peak DRAM bandwidth (bytes/s) by device-name fragment, most specific first. A ceiling:
# when a GPU has several variants, the fastest one's figure.
PEAK_BANDWIDTH = [("gh200", 4.9e12), ("h200", 4.8e12), ("h100 nvl", 3.9e12),
                  ("h100", 3.35e12), ("h800", 3.35e12), ("b200", 8.0e12), ("b100", 8.0e12),
                  ("gb200", 8.0e12), ("a100", 2.04e12), ("a800", 2.04e12), ("l40", 0.864e12),
                  ("a40", 0.696e12), ("a10", 0.6e12), ("l4", 0.3e12), ("v100", 0.9e12),
                  ("5090", 1.79e12), ("4090", 1.01e12), ("3090", 0.94e12)]
MEASURED_MARGIN = 1.5  # an unknown GPU: its measured copy bandwidth, times this
CALL_FLOOR_SHARE = 0.5  # no call through the timer beats half the fastest empty call
BYTES_FLOOR_SHARE = 0.5  # margin for kernels that legitimately skip part of an input


def child_flags(result: dict) -> list[Flag]:
    flags = []
    tampered = [t for t in result.get("tampered") or [] if isinstance(t, dict)]
    if tampered:
        first = tampered[0]
        what = ", ".join(str(w) for w in first.get("what", [])[:6])
        flags.append(Flag(code="tampered", severity="error",
                          message=f"the harness was modified in the candidate's process "
                                  f"(seen after {first.get('where')}): {what}"))
    if result.get("inputs_tampered"):
        flags.append(Flag(code="inputs_tampered", severity="error",
                          message=f"inputs of {result['inputs_tampered'][:3]} were modified "
                                  f"before their call"))
    if result.get("timed_aliased"):
        flags.append(Flag(code="output_aliases_input", severity="error",
                          message=f"timed calls {result['timed_aliased'][:5]} returned "
                                  f"memory of an input"))
    if result.get("threads"):
        flags.append(Flag(code="python_threads", severity="warning",
                          message=f"threads left running: {result['threads'][:3]}"))
    return flags


def completeness(expected_timed: int, timed_labels: list[str], has_timing: bool) -> list[Flag]:
    if has_timing and len(timed_labels) < expected_timed:
        return [Flag(code="timed_recheck_missing", severity="error",
                     message=f"{len(timed_labels)} of the {expected_timed} re-checked timed "
                             f"calls were reported: the timing cannot be trusted")]
    return []


def timing_plausible(timing: dict | None, trials: int) -> list[Flag]:
    if not timing:
        return []
    keys = ("min", "p25", "median", "p75", "max", "mean", "std")
    try:
        v = {k: float(timing[k]) for k in keys}
        ok = (int(timing["n"]) == trials and all(math.isfinite(x) for x in v.values())
              and 0 < v["min"] <= v["p25"] <= v["median"] <= v["p75"] <= v["max"]
              and v["min"] <= v["mean"] <= v["max"] and v["std"] >= 0)
    except (KeyError, TypeError, ValueError):
        ok = False
    if ok:
        return []
    return [Flag(code="implausible_timing", severity="error",
                 message=f"timing statistics are inconsistent: {timing}")]


def peak_bandwidth(device_name: str, measured: float | None) -> float | None:
    name = device_name.lower()
    for fragment, bw in PEAK_BANDWIDTH:
        if fragment in name:
            return bw
    return measured * MEASURED_MARGIN if measured else None


def physical_floor(median_ms: float | None, metrics: dict | None, device_kind: str,
                   device_name: str, flush_l2: bool) -> list[Flag]:
    """A median below the fastest a call can be was not measured honestly: half an empty
    call, or half the must-move bytes (L2 flushed) at the device's peak bandwidth."""
    if median_ms is None or not metrics or "error" in metrics:
        return []
    floors = []
    empty = metrics.get("empty_call_ms")
    if empty:
        floors.append((CALL_FLOOR_SHARE * empty, f"half the fastest empty call ({empty:.3g} ms)"))
    bw = peak_bandwidth(device_name, metrics.get("copy_bytes_per_s"))
    if device_kind == "cuda" and flush_l2 and bw:
        must = metrics.get("in_bytes", 0) + max(0, metrics.get("out_bytes", 0) -
                                                metrics.get("l2_bytes", 0))
        if must:
            floors.append((BYTES_FLOOR_SHARE * must / bw * 1e3,
                           f"half of {must} bytes from DRAM at {bw / 1e12:.2f} TB/s"))
    for floor_ms, why in floors:
        if median_ms < floor_ms:
            return [Flag(code="below_physical_floor", severity="error",
                         message=f"median {median_ms:.3g} ms is below the physical floor "
                                 f"{floor_ms:.3g} ms ({why})")]
    return []


def constant_reference(reference_seen: dict, correct_labels: list[str]) -> list[Flag]:
    """Every correctness trial's reference output `same_as_first`: input-independent."""
    if len(correct_labels) >= 2 and all(reference_seen.get(lb, {}).get("same_as_first")
                                        for lb in correct_labels[1:]):
        return [Flag(code="constant_reference", severity="warning",
                     message=f"the reference's output is the same for all "
                             f"{len(correct_labels)} correctness trials: a constant answer "
                             f"passes this problem; speedup not counted (see "
                             f"python -m kb_eval.check)")]
    return []


def shape_probe(diff_error: str | None, batch_note: str) -> list[Flag]:
    if diff_error is None:
        return []
    return [Flag(code="shape_specialized", severity="warning",
                 message=f"on {batch_note} the answer is wrong ({diff_error}): it holds "
                         f"only for the problem's own sizes")]
