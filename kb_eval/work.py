"""The work a problem asks of the hardware, and a timed call's share of the speed of light.

`ProblemWork`: the reference's FLOPs (elementwise ops count 0) and compulsory bytes
(inputs, weights, outputs once), counted on the meta device where possible. `SolShare`:
achieved FLOP/s and bytes/s over the machine's peaks, the larger being the share.
Only pydantic at import time (kb_eval.results imports these schemas).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable

from pydantic import BaseModel

META_MAX_S = 20.0  # a meta forward decomposed op by op (recurrent layers) past this: real


class ProblemWork(BaseModel):
    """What one reference forward must do: FLOPs and bytes moved at the least."""
    flops: int | None = None
    in_bytes: int | None = None
    weight_bytes: int | None = None
    out_bytes: int | None = None
    bytes: int | None = None  # inputs + weights + outputs, once each
    counted_on: str | None = None  # meta | cpu | cuda:0
    error: str | None = None  # why nothing was counted

    @property
    def intensity(self) -> float | None:
        """FLOPs per compulsory byte (the roofline's x axis)."""
        return self.flops / self.bytes if self.flops is not None and self.bytes else None


class SolShare(BaseModel):
    """A correct sample's speed against the machine's ceilings (1.0 = at peak). `share`
    is the larger of `flop_share` and `byte_share`; `reference_*` the same of the
    baseline's median; `peak` names the matmul rate used."""
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    flop_share: float | None = None
    byte_share: float | None = None
    share: float | None = None
    bound: str | None = None  # compute | memory: which share is the larger
    reference_share: float | None = None
    reference_flop_share: float | None = None
    reference_byte_share: float | None = None
    peak: str | None = None
    peak_flops_per_s: float | None = None
    bandwidth_bytes_per_s: float | None = None


def shares(work: ProblemWork, seconds: float, peak_flops: float | None,
           bandwidth: float | None) -> tuple[float | None, float | None]:
    """(FLOP share, byte share) of one call of `seconds`; None where a side is unknown."""
    if not seconds or seconds <= 0:
        return None, None
    flop = (work.flops / seconds / peak_flops
            if work.flops is not None and peak_flops else None)
    byte = work.bytes / seconds / bandwidth if work.bytes is not None and bandwidth else None
    return flop, byte


def larger(*xs: float | None) -> float | None:
    known = [x for x in xs if x is not None]
    return max(known) if known else None


# ------------------------------------------------------------------ counting
def count_work(module, precision: str, real: Callable[[], tuple] | None = None,
               where: str = "device") -> ProblemWork:
    """The problem's work, counted on the meta device, else (the meta forward failed or
    ran too long) on the real forward of `real()`'s (model, inputs) on `where`."""
    try:
        from kb_eval.eval.judge.meta_rnn import shape_only_rnns

        meta_model, meta_inputs = _meta_problem(module, precision)
        recurrent: list[int] = []  # their FLOPs by rule: decomposed on meta, they take seconds
        shape_only_rnns(meta_model, recurrent)
        with bounded(META_MAX_S):
            work = _count(meta_model, meta_inputs, "meta")
        return work.model_copy(update={"flops": work.flops + sum(recurrent)})
    except Exception as e:  # noqa: BLE001 - then the real forward, or nothing
        meta_error = f"meta: {type(e).__name__}: {e}".splitlines()[0][:200]
    if real is None:
        return ProblemWork(error=meta_error)
    try:
        return _count(*real(), where)
    except Exception as e:  # noqa: BLE001 - no counts, the sample still counts
        return ProblemWork(error=f"{meta_error}; {type(e).__name__}: {e}"[:300])


def _meta_problem(module, precision: str):
    import torch

    from kb_eval.inputs import make_init_inputs, make_inputs, precision_dtype

    dtype = precision_dtype(precision)
    inputs = make_inputs(module.get_inputs, 0, "meta", dtype)
    with torch.device("meta"):
        model = module.Model(*make_init_inputs(module.get_init_inputs, "meta"))
    return model.to(dtype=dtype).eval(), inputs


def _count(model, inputs: list, where: str) -> ProblemWork:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kb_eval.eval.child.observe import output_tensors
    from kb_eval.eval.child.probes import tensor_bytes

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(*inputs)
    outs = output_tensors(out)
    seen, weights = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:  # a tied weight is read once
            seen.add(id(t))
            weights += t.numel() * t.element_size()
    in_b, out_b = tensor_bytes(list(inputs)), tensor_bytes(outs)
    return ProblemWork(flops=int(counter.get_total_flops()), in_bytes=in_b,
                       weight_bytes=weights, out_bytes=out_b, bytes=in_b + weights + out_b,
                       counted_on=where)


@contextlib.contextmanager
def bounded(seconds: float, error: type[Exception] = TimeoutError):
    """`error` in the block once it has run `seconds` (a timer signal: the main thread
    only; elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise error(f"over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
