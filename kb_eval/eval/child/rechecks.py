"""The re-checks of timed calls, in the candidate's child: a few calls, picked after they
return, have their outputs saved for the reference to redo, their inputs compared with a
fresh draw, and their outputs watched for late writes (a reused buffer is not one).

Under the timing lock only copies are made; waits, saves and draws come after the timing
step. Beyond `DEFER_BYTES` an output is saved at once and only its wait runs beside the
timing (`_Settling`); aliased ones and those beyond `SETTLING_MAX_BYTES` are done at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from kb_eval import clocks
from kb_eval.eval.child.observe import _storage_span, aliased_inputs
from kb_eval.eval.child.probes import (SETTLE_S, changed_inputs, first_look,
                                       look_after_save, same_outputs, settled, sync,
                                       tensor_bytes, unchanged)

DEFER_BYTES = 512 << 20  # device memory a sample's re-checks left for later may hold
# the largest output settling beside the timing (schedule/overlap.py: three footprints)
SETTLING_MAX_BYTES = 2 << 30

# (label, tensors): into the server's buffers (the bytes copied there returned) or a file
Save = Callable[[str, list], "list | None"]
Draw = Callable[[int], list]  # the timed inputs of a seed, drawn again


@dataclass
class _Later:
    label: str
    outputs: list  # as the candidate returned them (a late write changes them)
    snapshot: list  # their copies, taken when the call returned
    inputs: list  # copies of the inputs after the call
    seed: int
    taken: float  # clocks.perf_counter() of the copies
    returns: int  # calls returned before it was taken (Rechecks.returns)
    facts: dict  # seen at once: aliasing, devices


@dataclass
class _Settling:
    label: str
    outputs: list  # as the candidate returned them (saved already)
    look: list  # what tells a change: probes.first_look, look_after_save
    taken: float
    returns: int
    facts: dict  # aliasing, devices, mutated inputs


@dataclass
class Rechecks:
    device: torch.device
    save: Save
    draw: Draw
    seen: dict  # label -> what its re-check saw (the worker's `seen`)
    on_device: Callable[[list], bool] = lambda ts: False  # `save` copies them on the device
    later: list[_Later] = field(default_factory=list)
    kept: int = 0  # bytes held by `later`
    returns: int = 0  # calls returned so far
    returned_at: dict[tuple, int] = field(default_factory=dict)  # storage -> last return
    settling: _Settling | None = None  # saved at once, its wait going on beside the timing

    def returned(self, out: Any) -> None:
        """After every call: note its storages; settle an output whose wait is over."""
        self.returns += 1
        if self.later or self.settling:
            for t in out if type(out) in (tuple, list) else [out]:
                if type(t) is torch.Tensor and (where := _storage_span(t)) is not None:
                    self.returned_at[where] = self.returns
        if self.settling and clocks.perf_counter() - self.settling.taken >= SETTLE_S:
            self._settle()

    def take(self, label: str, tensors: list, seed: int, inputs: list) -> None:
        """A picked timed call's outputs, right after it returned (timing lock held)."""
        facts = {"aliased": aliased_inputs(tensors, inputs),
                 "devices": [t.device.type for t in tensors]}
        size = 2 * tensor_bytes(tensors) + tensor_bytes(inputs)
        if facts["aliased"] or self.kept + size > DEFER_BYTES:
            self._settle()  # one settling output at a time
            facts["mutated"] = changed_inputs(inputs, self.draw(seed))
            if facts["aliased"] or not _may_settle(tensors):
                calm = settled(tensors, self.device, 0.0, lambda ts: self.save(label, ts),
                               self.on_device)
                self.seen[label] = {**facts, "unsettled": not calm}
                return
            look = first_look(tensors, self.on_device(tensors))
            look = look_after_save(tensors, look, self.save(label, tensors))
            self.settling = _Settling(label, list(tensors), look, clocks.perf_counter(),
                                      self.returns, facts)
            return
        self.kept += size
        self.later.append(_Later(
            label, list(tensors), [t.detach().clone() for t in tensors],
            [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs], seed,
            clocks.perf_counter(), self.returns, facts))

    def _settle(self) -> None:
        """The settling output looked at again once its wait is over."""
        r, self.settling = self.settling, None
        if r is None:
            return
        self._wait_out(r.taken)
        changed = not unchanged(r.outputs, r.look)
        self.seen[r.label] = {**r.facts, "unsettled": changed and not self._reused(r)}

    def _wait_out(self, taken: float) -> None:
        """Sleep until SETTLE_S after `taken` (clocks.perf_counter()), then synchronize."""
        clocks.sleep(max(0.0, SETTLE_S - (clocks.perf_counter() - taken)))
        sync(self.device)

    def _reused(self, r: "_Later | _Settling") -> bool:
        """Whether a later call returned one of `r`'s storages again (a reused buffer)."""
        return any(self.returned_at.get(_storage_span(t), 0) > r.returns for t in r.outputs)

    def finish(self) -> None:
        """What `take` left: after the timing step, with the device held shared again."""
        self._settle()
        for r in self.later:
            self._wait_out(r.taken)
            changed = not same_outputs([t.detach() for t in r.outputs], r.snapshot)
            self.save(r.label, r.snapshot)
            self.seen[r.label] = {**r.facts, "mutated": changed_inputs(r.inputs, self.draw(r.seed)),
                                  "unsettled": changed and not self._reused(r)}
        self.later.clear()
        self.kept = 0


def _may_settle(tensors: list) -> bool:
    """Whether these outputs can wait beside the timing: plain dense, <= SETTLING_MAX_BYTES."""
    return (all(type(t) is torch.Tensor and t.layout == torch.strided for t in tensors)
            and tensor_bytes(tensors) <= SETTLING_MAX_BYTES)
