"""The memory plan's side in the reference server (kb_eval/eval/judge/reference_worker.py).

The sizes the plan needs (schedule/memplan.py), taken without allocating anything of the
problem's size; and the server's own footprint: the reference outputs it keeps, bounded;
what it gives back after a call, so a candidate running next finds the memory a user would
expect free; one retry of a call that ran out of memory; and a forward's peak.
"""

from __future__ import annotations

import functools
import gc

import torch

from kb_eval.eval.child.observe import output_tensors
from kb_eval.eval.child.probes import tensor_bytes
from kb_eval.eval.judge.loaded import LOADED, Problem
from kb_eval.eval.judge.meta_rnn import shape_only_rnns
from kb_eval.eval.wire.reference import PlanRequest
from kb_eval.harness import load_problem
from kb_eval.inputs import make_init_inputs, make_inputs, precision_dtype
from kb_eval.work import bounded

KEEP_SHARE = 0.03  # of a GPU's memory, at most, for reference outputs kept between samples
RELEASE_SLACK = 1 << 30  # cached allocator blocks beyond what is kept: returned after a call
# A forward on the meta device past this bound leaves the outputs' size unknown (an op
# without a meta kernel runs decomposed in Python: seconds for a deep LSTM).
META_FORWARD_MAX_S = 2.0


def room_for(nbytes: int, device: torch.device, budget: int) -> bool:
    """Whether outputs of `nbytes` may be kept (all problems' within `budget`), dropping
    least recently used problems' outputs to make room."""
    if device.type == "cuda":
        budget = min(budget, int(KEEP_SHARE * torch.cuda.get_device_properties(device).total_memory))
    total = sum(p.bytes for p in LOADED.values())
    for p in list(LOADED.values())[:-1]:  # never the problem in hand
        if total + nbytes <= budget:
            break
        total -= p.bytes
        p.forget_outputs()
    return total + nbytes <= budget


def with_room(call, device: torch.device, give_back=None):
    """`call()`, once more after `give_back(device)` if it ran out of memory; by default
    after giving the allocator's cached blocks back, on a GPU only: memory cached in
    blocks too small for the request is an OOM of ours, not the problem's."""
    try:
        return call()
    except torch.OutOfMemoryError:
        if give_back is None and device.type != "cuda":
            raise
    (give_back or (lambda d: release(d, force=True)))(device)
    return call()


def reset_peak(device: torch.device) -> int:
    """Start counting a forward's peak; the memory held before it (0 off a GPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def note_peak(p: Problem, device: torch.device, before: int) -> None:
    """The most device memory one forward took above what was held before it (its
    inputs were drawn just before, so they are not counted here: added by the plan)."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
        p.peak_bytes = max(p.peak_bytes or 0, peak)


def release(device: torch.device, force: bool = False) -> None:
    """Give the device back cached allocator blocks beyond the kept outputs (skipped when
    small); a full collection only when forced (a retry after an OOM)."""
    if device.type != "cuda":
        return
    kept = sum(p.bytes for p in LOADED.values())
    if force or torch.cuda.memory_reserved(device) > kept + RELEASE_SLACK:
        if force:
            gc.collect()
        torch.cuda.empty_cache()


def plan_problem(payload: PlanRequest, device: torch.device) -> dict:
    """What the memory plan needs, allocating nothing of the problem's size: its inputs',
    outputs' and weights' bytes (meta device, or `payload.sizes`) and what the device offers.
    `payload.drop`: drop everything kept first (a retry after an OOM)."""
    if payload.drop:
        LOADED.clear()
    release(device, force=payload.drop)
    plan = dict(payload.sizes or {}) or _problem_sizes(payload, device)
    if device.type == "cuda":
        plan["free_bytes"], plan["total_bytes"] = torch.cuda.mem_get_info(device)
        plan["reserved_bytes"] = torch.cuda.memory_reserved(device)  # this server's own
    return plan


def _problem_sizes(payload: PlanRequest, device: torch.device) -> dict:
    """The bytes of the problem's inputs, outputs and weights, from the meta device."""
    module, init = load_problem(payload.problem_code, payload.precision, device)
    plan: dict = {"in_bytes": None, "out_bytes": None}
    dtype = precision_dtype(payload.precision)
    try:
        _meta_ready()  # its imports (seconds) before any meta op and the bounded forward
        meta_inputs = make_inputs(module.get_inputs, 0, "meta", dtype)
        plan["in_bytes"] = tensor_bytes(meta_inputs)
        with torch.device("meta"):
            model = module.Model(*make_init_inputs(module.get_init_inputs, "meta"))
            model = model.to(dtype=dtype)
            plan["weights_bytes"] = sum(tensor_bytes(t) for t in model.state_dict().values())
            plan["itemsize"] = dtype.itemsize
            shape_only_rnns(model)  # else decomposed op by op: seconds (meta_rnn.py)
            with within(META_FORWARD_MAX_S):
                out = model(*meta_inputs)
        plan["out_bytes"] = tensor_bytes(output_tensors(out))
    except Exception as e:  # noqa: BLE001 - an op without a meta kernel: sizes unknown
        plan["meta_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return plan


@functools.cache
def _meta_ready() -> None:
    """The meta device's first op imports torch._dynamo (seconds): done before the bounded
    forward, so that the bound times the forward alone; only when sizes were not kept."""
    torch.ones(2, device="meta").add(1)


class _TooLong(Exception):
    pass


def within(seconds: float):
    """Raise _TooLong in the block once it has run `seconds` (the server runs its tasks
    in its main thread)."""
    return bounded(seconds, _TooLong)
