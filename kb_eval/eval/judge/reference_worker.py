"""The reference server's process: one long-lived trusted child per device, where no
candidate code runs; it reads only the candidate's output files or exported buffers.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kb_eval.eval.child.probes import host_weights
from kb_eval.eval.judge.compare import compare_labels
from kb_eval.eval.judge.floor import device_floor
from kb_eval.eval.judge.loaded import LOADED
from kb_eval.eval.judge.rounds import estimate_call, time_rounds
from kb_eval.eval.schedule.memplan_server import plan_problem, release
from kb_eval.eval.wire import device as device_wire
from kb_eval.eval.wire.reference import (DeviceFloorRequest, EstimateRequest, ExportRequest,
                                         ExportSpec, FreeRequest, PlanRequest, RoundsRequest,
                                         ServerRequest, checked_reply, parse_request)
from kb_eval.timing import SPENT, spent_since

# Per sample in flight (its run folder): the buffers its child copies outputs into (GPU).
EXCHANGES: dict[str, device_wire.Exported] = {}


def compare_sample(payload: dict, workdir: Path) -> dict:
    """Answer one server request (wire/reference.py), checked against its reply model."""
    request = parse_request(payload)
    return checked_reply(request, _answer(request, torch.device(request.device)))


def _answer(request: ServerRequest, device: torch.device) -> dict:
    if isinstance(request, PlanRequest):
        return plan_problem(request, device)
    if isinstance(request, RoundsRequest):
        return time_rounds(request, device)
    if isinstance(request, EstimateRequest):
        return estimate_call(request, device)
    if isinstance(request, DeviceFloorRequest):
        return device_floor(request.device_floor, device, request.peaks)
    if isinstance(request, ExportRequest):
        return export_buffers(request.export, device)
    if isinstance(request, FreeRequest):
        return free_buffers(request.exchange_free)
    key = request.compare.exchange
    if key is not None and key not in EXCHANGES:  # exported by a server since restarted
        return {"exchange_lost": True}
    spent_before = SPENT.copy()
    try:
        result = compare_labels(request, device,
                                EXCHANGES[key].views() if key is not None else None)
    finally:
        free_buffers(key)
    result["spent"] = spent_since(spent_before, ("reference", "truth", "metrics", "judge"))
    return result


def export_buffers(spec: ExportSpec | dict, device: torch.device) -> dict:
    """Buffers for one sample's outputs, kept until free_buffers: all `n`, or {"short"}.
    `give_back`: what the server keeps goes first, then as many as fit (>= `at_least`)."""
    spec = ExportSpec.model_validate(spec)
    free_buffers(spec.key)  # a retry of the same sample
    n, nbytes, at_least = spec.n, spec.bytes, spec.at_least
    try:
        if spec.give_back:
            LOADED.clear()
            release(device, force=True)
            exported = device_wire.Exported(n, nbytes, device, at_least=at_least)
        else:
            # nothing given back: other samples' paired rounds keep theirs to the end
            try:
                exported = device_wire.Exported(n, nbytes, device)
            except device_wire.CudaError as e:
                return {"short": True, "error": str(e)[:300]}
    except (device_wire.CudaError, ValueError) as e:  # files then (an answer: a failed
        # call would end the server)
        return {"error": str(e)[:300]}
    EXCHANGES[spec.key] = exported
    return {"handles": exported.handles, "bytes": exported.nbytes}


def free_buffers(key: str | None) -> dict:
    exported = EXCHANGES.pop(key, None) if key is not None else None
    if exported is not None:
        exported.free()
    return {}


def warm_up() -> None:
    """At server start: draw the fingerprints' multipliers before the device is held."""
    host_weights()
