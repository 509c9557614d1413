"""The re-checks of timed calls, in the candidate's child: a few timed calls, picked after
they return, have their outputs saved for the reference to redo (with the call's seed),
their inputs compared with a fresh draw of the same seed, and their outputs watched for
writes that land after the call returned.

Under the timing lock only what cannot wait is done: the outputs and inputs are copied
(the next call reuses the input buffers). The wait for late writes (10 ms), the save and
the fresh draw come once the device has gone to the next sample's timing step: on the
H100 the re-checks, their waits mostly, held the device alone for ~0.14 s of every
KernelBench level-2 sample. What is saved is the output as the call returned it, as
before; a late write has longer to show, not shorter. An output whose storage a later
call returned again (a candidate that reuses its output buffer) is not taken for a late
write. Outputs that alias an input, and those beyond `DEFER_BYTES`, are re-checked at
once, as before (probes.settled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from kb_eval import clocks
from kb_eval.eval.child.observe import _storage_span, aliased_inputs
from kb_eval.eval.child.probes import (SETTLE_S, changed_inputs, same_outputs, settled, sync,
                                       tensor_bytes)

DEFER_BYTES = 512 << 20  # device memory a sample's re-checks left for later may hold

Save = Callable[[str, list], None]  # (label, tensors): into the server's buffers or a file
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
class Rechecks:
    device: torch.device
    save: Save
    draw: Draw
    seen: dict  # label -> what its re-check saw (the worker's `seen`)
    later: list[_Later] = field(default_factory=list)
    kept: int = 0  # bytes held by `later`
    returns: int = 0  # calls returned so far
    returned_at: dict[tuple, int] = field(default_factory=dict)  # storage -> last return

    def returned(self, out: Any) -> None:
        """After every call, timed or not: which storages it returned."""
        self.returns += 1
        if self.later:
            for t in out if type(out) in (tuple, list) else [out]:
                if type(t) is torch.Tensor and (where := _storage_span(t)) is not None:
                    self.returned_at[where] = self.returns

    def take(self, label: str, tensors: list, seed: int, inputs: list) -> None:
        """A picked timed call's outputs, right after it returned (timing lock held)."""
        facts = {"aliased": aliased_inputs(tensors, inputs),
                 "devices": [t.device.type for t in tensors]}
        size = 2 * tensor_bytes(tensors) + tensor_bytes(inputs)
        if facts["aliased"] or self.kept + size > DEFER_BYTES:
            mutated = changed_inputs(inputs, self.draw(seed))
            calm = settled(tensors, self.device, 0.0, lambda ts: self.save(label, ts))
            self.seen[label] = {**facts, "mutated": mutated, "unsettled": not calm}
            return
        self.kept += size
        self.later.append(_Later(
            label, list(tensors), [t.detach().clone() for t in tensors],
            [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs], seed,
            clocks.perf_counter(), self.returns, facts))

    def finish(self) -> None:
        """What `take` left: after the timing step, with the device held shared again."""
        for r in self.later:
            clocks.sleep(max(0.0, SETTLE_S - (clocks.perf_counter() - r.taken)))
            sync(self.device)
            changed = not same_outputs([t.detach() for t in r.outputs], r.snapshot)
            reused = any(self.returned_at.get(_storage_span(t), 0) > r.returns for t in r.outputs)
            self.save(r.label, r.snapshot)
            self.seen[r.label] = {**r.facts, "mutated": changed_inputs(r.inputs, self.draw(r.seed)),
                                  "unsettled": changed and not reused}
        self.later.clear()
        self.kept = 0

