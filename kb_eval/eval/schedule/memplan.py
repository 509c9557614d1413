"""The memory plan, in the parent: whether a problem can be judged on a device, and whether
there is room for its float64 truth (docs/GUARANTEES.md).

It reads the sizes the reference server reports (schedule/memplan_server.py), keeps them
across runs (`KeptSizes`), and takes the device's free memory as it is with the evaluator
idle (`IdleMemory`), so that neighbours in flight at plan time do not shrink it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass
class MemoryPlan:
    """Whether a problem can be judged on a device, from the reference's footprint
    (inputs + outputs, or the baseline's measured peak when larger) and what the device
    offers with the evaluator idle (free GPU memory after the reference server released
    what it does not keep; on a CPU, the children's memory limit)."""
    need_bytes: int | None = None
    free_bytes: int | None = None
    out_bytes: int | None = None  # one call's outputs (sizes how many are checked)
    reason: str | None = None  # set: too large to judge here
    truth_reason: str | None = None  # set: no room for the float64 truth (KernelBench rule)
    truth_bytes: int | None = None  # what computing one label's float64 truth needs

    @property
    def fits(self) -> bool:
        return self.reason is None


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):.1f} GiB"


def make_plan(sizes: dict, baseline_peak: int | None, mem_limit_mb: int | None) -> MemoryPlan:
    """The plan from the server's sizes (memplan_server.plan_problem) and the baseline's
    peak."""
    known = [sizes.get("in_bytes"), sizes.get("out_bytes"), baseline_peak]
    need = None
    if sizes.get("in_bytes") is not None:
        need = max(sizes["in_bytes"] + (sizes.get("out_bytes") or 0), baseline_peak or 0)
    elif baseline_peak:
        need = baseline_peak
    free = sizes.get("free_bytes")
    if free is None and mem_limit_mb:
        free = mem_limit_mb << 20  # a CPU: the host memory a child may use
    plan = MemoryPlan(need, free, sizes.get("out_bytes"))
    where = "free on the device" if "free_bytes" in sizes else "under the memory limit"
    if need is not None and free is not None and need > free:
        plan.reason = (f"the reference needs {gib(need)} ({'inputs ' + gib(known[0])}, "
                       f"outputs {gib(known[1])}), {gib(free)} {where}")
    elif need is not None and free is not None:
        # The float64 run of one label on top: the model, inputs, outputs and temporaries
        # widened to 8 bytes an element.
        widen = 8 // max(1, int(sizes.get("itemsize") or 4))
        truth = need + widen * (need + (sizes.get("weights_bytes") or 0))
        if truth > free:
            plan.truth_reason = (f"no room for the float64 truth: it needs {gib(truth)}, "
                                 f"{gib(free)} {where}")
        else:
            plan.truth_bytes = truth
    return plan


def keep_bytes(mem_limit_mb: int | None) -> int:
    """How many bytes of reference outputs the server may keep between samples: up to
    8 GiB, and a quarter of its memory limit (outputs on a CPU count towards it)."""
    return min(8 << 30, (mem_limit_mb << 20) // 4 if mem_limit_mb else 8 << 30)


class IdleMemory:
    """The device's free memory with the evaluator idle: free now plus what other samples in
    flight hold; memory not the server's own is taken at its least, per device."""

    def __init__(self):
        self._others: dict[str, int] = {}  # device memory not ours, at its least
        self._guard = threading.Lock()

    def free(self, device: str, sizes: dict) -> dict:
        """`sizes` (the server's plan answer) with `free_bytes` as the idle device has it."""
        total, free = sizes.get("total_bytes"), sizes.get("free_bytes")
        reserved = sizes.get("reserved_bytes")
        if total is None or free is None or reserved is None:
            return sizes
        with self._guard:
            others = min(total - free - reserved, self._others.get(device, total))
            self._others[device] = others
        return {**sizes, "free_bytes": max(free, total - others - reserved)}


class KeptSizes:
    """Each problem's sizes for the memory plan, kept in the cache across runs (keyed by the
    problem's code, precision and toolchain) so a later run skips the meta forward."""

    FIELDS = ("in_bytes", "out_bytes", "weights_bytes", "itemsize")

    def __init__(self, folder: Path, fingerprint: str):
        self.folder, self.fingerprint = folder, fingerprint

    def _path(self, code: str, precision: str) -> Path:
        key = hashlib.sha256("\0".join(["plan-1", self.fingerprint, precision, code])
                             .encode()).hexdigest()
        return self.folder / f"{key}.json"

    def get(self, code: str, precision: str) -> dict | None:
        try:
            sizes = json.loads(self._path(code, precision).read_text())
        except (OSError, ValueError):
            return None
        ok = (isinstance(sizes, dict) and set(sizes) == set(self.FIELDS)
              and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                      for v in sizes.values()))
        return sizes if ok else None

    def put(self, code: str, precision: str, plan: dict) -> None:
        sizes = {k: plan.get(k) for k in self.FIELDS}
        if plan.get("meta_error") or not all(isinstance(v, int) for v in sizes.values()):
            return
        path = self._path(code, precision)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps(sizes))
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs the next run the forward
