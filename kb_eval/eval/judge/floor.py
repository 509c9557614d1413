"""What the physical floor needs, measured in the reference server: the problem's figures
(once per problem) and the device's own (once per device and run)."""

from __future__ import annotations

import torch

from kb_eval import peaks
from kb_eval.eval.child.observe import output_tensors
from kb_eval.eval.child.probes import (copy_bandwidth, empty_call_ms, fingerprints, sync,
                                       tensor_bytes)
from kb_eval.eval.judge.loaded import Problem
from kb_eval.eval.wire.reference import CompareRequest
from kb_eval.harness import inputs_for
from kb_eval.profile.launches import count_or_error
from kb_eval.timing import TimingSettings
from kb_eval.work import count_work


def floor_metrics(p: Problem, payload: CompareRequest, device: torch.device) -> dict:
    """The bytes a call reads and writes, (GPU) the L2 size, and the problem's work. Untimed."""
    try:
        inputs = inputs_for(p.module, payload.seed, ("correct", 0), payload.precision, device)
        with torch.no_grad():
            out = p.model(*inputs)
        sync(device)
        l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
        outs = output_tensors(out)
        deterministic = None if p.first is None else fingerprints(outs) == p.first
        in_bytes, out_bytes = tensor_bytes(list(inputs)), tensor_bytes(outs)
        peak = None if p.peak_bytes is None else in_bytes + p.peak_bytes
        launches = (count_or_error(lambda: p.model(*inputs), device)  # once per problem
                    if payload.count_launches else None)
        work = count_work(p.module, payload.precision, lambda: (p.model, inputs),
                          str(device))
        return {"in_bytes": in_bytes, "out_bytes": out_bytes, "peak_bytes": peak,
                "launches": launches, "deterministic": deterministic, "l2_bytes": l2,
                "work": work.model_dump()}
    except Exception as e:  # noqa: BLE001 - no floor then, but the outputs still count
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def device_floor(settings: TimingSettings, device: torch.device,
                 measure_peaks: bool = False) -> dict:
    """The device's floor figures: an empty call's time through the run's timer and (GPU) a
    copy's bandwidth. Timed: asked once per device, holding the device alone."""
    try:
        figures = {"empty_call_ms": empty_call_ms(device, settings, []),
                   "copy_bytes_per_s": copy_bandwidth(device)}
        if measure_peaks:  # no peaks file for this machine yet (kb_eval/peaks.py)
            figures["peaks_measured"] = peaks.measure(str(device))
        return figures
    except Exception as e:  # noqa: BLE001 - no device figures then: the floor uses fewer
        return {"error": f"{type(e).__name__}: {e}"[:300]}
