"""The profiler run, in an isolated child: build one model, warm it up, record `steps`
forwards with torch.profiler, write the Chrome trace, and return figures per forward.

Time is attributed in units that add up to the total exactly: on CUDA each device
activity belongs to the CPU event that launched it (an aten operator, or the forward
marker for extension kernels); on a CPU each event's self time inside the marker."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from kb_eval.profile.categories import CATEGORIES, category_of
from kb_eval.profile.launches import FORWARD_MARK, is_device_activity, launch_counts
from kb_eval.profile.models import build_subject


def profile_task(payload: dict, workdir: Path) -> dict:
    device = torch.device(payload["device"])
    model, inputs, facts = build_subject(payload, device)
    out_dir = Path(payload["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = payload["steps"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.type == "cuda" else [])
    with torch.no_grad():
        for _ in range(payload["warmup"]):
            model(*inputs)
        _sync(device)
        with profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function(FORWARD_MARK):
                    out = model(*inputs)
                _sync(device)
                del out  # freed outside the marker: the caller's cost, not the forward's
    prof.export_chrome_trace(str(out_dir / "trace.json"))
    result = summarize(prof, device, steps)
    result.update(facts)
    return result


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summarize(prof, device: torch.device, steps: int) -> dict:
    events = prof.events()
    on_cuda = device.type == "cuda"
    units = _device_units(events) if on_cuda else _cpu_units(events)
    by_category = defaultdict(float)
    for category, us in units:
        by_category[category] += us
    total_us = sum(by_category.values())
    marks = [e for e in events if e.name == FORWARD_MARK and e.device_type == DeviceType.CPU]
    return {
        "time_kind": "device" if on_cuda else "cpu",
        "steps": steps,
        "total_ms": total_us / 1e3 / steps,
        "wall_ms": sum(e.cpu_time_total for e in marks) / 1e3 / steps,
        "categories": {c: by_category.get(c, 0.0) / 1e3 / steps for c in CATEGORIES},
        **launch_counts(events, steps),
        "ops": _op_rows(prof, events, on_cuda, steps),
    }


def _device_units(events) -> list[tuple[str, float]]:
    """(category, us) per device activity: by the aten operator that launched it, else by
    the kernel's name; activities no CPU event claims go to 'other'."""
    units = []
    for e in events:
        if e.device_type != DeviceType.CPU or not e.kernels:
            continue
        units.extend((unit_category(e, k.name), k.duration) for k in e.kernels)
    device_total = sum(e.time_range.elapsed_us() for e in events if is_device_activity(e))
    claimed = sum(us for _, us in units)
    if device_total > claimed:
        units.append(("other", device_total - claimed))
    return units


def unit_category(event, kernel_name: str | None = None) -> str:
    """The category of the outermost categorised aten operator around `event` (copies stay
    memory/copy)."""
    own = category_of(event.name if event.name.startswith("aten::") else None, kernel_name)
    if own == "memory/copy":
        return own
    outer, parent = None, event.cpu_parent
    while parent is not None:
        found = category_of(parent.name) if parent.name.startswith("aten::") else "other"
        outer = found if found != "other" else outer
        parent = parent.cpu_parent
    return outer or own


def _cpu_units(events) -> list[tuple[str, float]]:
    """(category, us) per CPU event inside a forward: its self time (so nothing counts
    twice); the marker's own self time is Python and extension code outside aten."""
    units = []
    stack = [e for e in events if e.name == FORWARD_MARK and e.device_type == DeviceType.CPU]
    while stack:
        e = stack.pop()
        units.append((unit_category(e), e.self_cpu_time_total))
        stack.extend(e.cpu_children)
    return units


def _op_rows(prof, events, on_cuda: bool, steps: int) -> list[dict]:
    """One row per aten operator: calls, times, launches per forward, and its category."""
    launched: dict[str, Counter] = defaultdict(Counter)
    counted_in: dict[str, Counter] = defaultdict(Counter)
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith("aten::"):
            launched[e.name].update(k.name for k in e.kernels)
            own_us = (sum(k.duration for k in e.kernels) if on_cuda
                      else e.self_cpu_time_total)
            counted_in[e.name][unit_category(e)] += own_us
    rows = []
    for avg in prof.key_averages():
        if not avg.key.startswith("aten::"):
            continue
        self_us = avg.self_device_time_total if on_cuda else avg.self_cpu_time_total
        total_us = avg.device_time_total if on_cuda else avg.cpu_time_total
        counted = counted_in[avg.key].most_common(1)
        rows.append({"op": avg.key, "category": counted[0][0] if counted else
                     category_of(avg.key),
                     "calls": avg.count / steps, "self_ms": self_us / 1e3 / steps,
                     "total_ms": total_us / 1e3 / steps,
                     "self_cpu_ms": avg.self_cpu_time_total / 1e3 / steps,
                     "kernels": {k: n / steps for k, n in launched[avg.key].most_common()}})
    return rows
