"""Whether a sample's outputs go to the reference server on the GPU (wire/device.py) or
through files, and the buffers' life from the parent's side: one buffer per checked call
when the buffers plus twice the reference's footprint fit in 80 % of the idle device and
plus the float64 truth's need in 90 %; where fewer fit, the first calls get buffers (at
least MIN_SLOTS) and the rest files; on a CPU, files.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from kb_eval.eval.child.probes import recheck_count
from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.memplan import MemoryPlan
from kb_eval.eval.schedule.context import EvalContext, is_cpu
from kb_eval.eval.wire.device import MAX_SLOTS, slot_size

MIN_OUT_BYTES = 1 << 20  # below this a file in /dev/shm costs about what a server call does
MIN_SLOTS = 2  # fewer buffers are not worth a sample's export


@dataclass
class Exchange:
    key: str  # the sample's, unique while it is in flight
    spec: dict  # {"handles", "bytes"}: the child's payload
    sent: bool = False  # the comparison took them (the server frees them after it)


def checked_calls(ctx: EvalContext, trials: int, out_bytes: int | None) -> int:
    """Calls whose outputs the server checks: trials, re-checked timed calls, the probe."""
    cfg = ctx.config
    return trials + recheck_count(cfg.recheck_timed, cfg.timing.n_calls, out_bytes) + 1


def exchange_bytes(ctx: EvalContext, plan: MemoryPlan, trials: int, device: str) -> int:
    """The device memory a sample's buffers take (0: files): one per checked call, or as
    many as there is room for, at least two."""
    out = plan.out_bytes
    if is_cpu(device) or not out or out < MIN_OUT_BYTES or not plan.free_bytes \
            or plan.need_bytes is None:
        return 0
    n = checked_calls(ctx, trials, out)
    if n > MAX_SLOTS:
        return 0
    size, free = slot_size(out), plan.free_bytes
    room = 0.8 * free - 2 * plan.need_bytes
    if plan.truth_bytes is not None:
        room = min(room, 0.9 * free - plan.truth_bytes)
    fit = min(n, int(max(room, 0) // size))
    return fit * size if fit >= MIN_SLOTS else 0


@contextmanager
def exchange_for(refs: ReferenceStore, device: str, key: str, n: int,
                 out_bytes: int | None, use: bool) -> Iterator[Exchange | None]:
    """The sample's buffers for the length of the block (None: files), freed at its end
    unless a comparison took them."""
    key = f"{os.getpid()}:{key}"
    spec = refs.export(device, key, n, slot_size(out_bytes), MIN_SLOTS) if use else None
    exchange = Exchange(key, spec) if spec else None
    try:
        yield exchange
    finally:
        if exchange is not None and not exchange.sent:
            refs.free_exchange(device, exchange.key)
