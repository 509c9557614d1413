"""Launch counts: kernels (CUDA) or aten operator calls (CPU) of one forward, for
`python -m kb_eval.profile` and the eval records. Imported by the candidate's child: it
must not import anything of the judge's."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler import profile
from torch.profiler import record_function

FORWARD_MARK = "kb_eval::forward"
# a record's `count`: GPU kernels (no memcpy/memset), or a CPU's outermost aten calls
UNITS = {"cuda": "cuda_kernels", "cpu": "aten_ops"}


def is_device_activity(e) -> bool:
    return (e.device_type == DeviceType.CUDA and not e.is_user_annotation
            and e.name != FORWARD_MARK)


def is_mem_activity(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset"))


def _is_aten(e) -> bool:
    return e.device_type == DeviceType.CPU and e.name.startswith("aten::")


def _outermost_aten(e) -> bool:
    parent = e.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def launch_counts(events, steps: int) -> dict:
    """Per forward: kernels launched, memcpy/memset activities, every aten operator call
    (nested ones included) and the outermost ones only."""
    device_events = [e for e in events if is_device_activity(e)]
    kernels = sum(1 for e in device_events if not is_mem_activity(e.name))
    aten = [e for e in events if _is_aten(e)]
    return {"kernel_launches": kernels / steps,
            "memory_activities": (len(device_events) - kernels) / steps,
            "aten_calls": len(aten) / steps,
            "top_aten_calls": sum(1 for e in aten if _outermost_aten(e)) / steps}


def count_launches(call: Callable[[], object], device: torch.device) -> dict:
    """One profiled `call()` (already warmed up by the caller): {"unit", "count"} plus the
    detail of `launch_counts`."""
    on_cuda = device.type == "cuda"
    # the autograd profiler: torch.profiler.profile's start imports inductor (seconds)
    with torch.no_grad(), profile(use_cpu=True, use_device="cuda" if on_cuda else None,
                                       use_kineto=True) as prof:
        with record_function(FORWARD_MARK):
            out = call()
        if on_cuda:
            torch.cuda.synchronize(device)
        del out
    counts = launch_counts(prof.function_events, 1)
    unit = UNITS["cuda" if on_cuda else "cpu"]
    count = counts["kernel_launches"] if on_cuda else counts["top_aten_calls"]
    return {"unit": unit, "count": int(count), **{k: int(v) for k, v in counts.items()}}


def count_or_error(call: Callable[[], object], device: torch.device) -> dict:
    """count_launches, or {"error": why} (a diagnostic: never fails a sample)."""
    try:
        return count_launches(call, device)
    except Exception as e:  # noqa: BLE001 - the profiler or the call failed: no count
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}


def paired_counts(candidate: object, reference: object) -> dict:
    """The record's `launches` from both sides' reports (the candidate's: only a whole
    number in the same unit)."""
    sides = {"candidate": candidate, "reference": reference}
    ref = reference if isinstance(reference, dict) else {}
    unit = ref.get("unit")
    out: dict = {"unit": unit}
    errors = []
    for side, report in sides.items():
        report = report if isinstance(report, dict) else {}
        count = report.get("count")
        if isinstance(count, int) and count >= 0 and report.get("unit") == unit:
            out[side] = count
        else:
            errors.append(f"{side}: {report.get('error') or 'no count'}")
    out["error"] = "; ".join(errors) or None
    return out
