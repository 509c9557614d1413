"""What happens around each timed call, the same on both sides of a paired timing: the
candidate's bookkeeping (idle check, CPU ledger, aliasing, tripwires) slows host-bound
calls, so the reference server runs it too, with its own snapshot and ledger.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable

import torch

from kb_eval.eval.child.integrity import Snapshot
from kb_eval.eval.child.observe import aliased_inputs, output_tensors
from kb_eval.eval.child.probes import into_buffers, sync, thread_names
from kb_eval.eval.child.threads import Ledger, warm_pool


class Watch:
    """The tripwires and what they caught (reported to the parent, which flags it)."""

    def __init__(self, device: torch.device):
        warm_pool()  # PyTorch's own threads exist before the candidate's can
        self.ledger = Ledger(device)  # CPU its threads spend outside timed calls
        self.snapshot = Snapshot()
        self.threads = thread_names()
        self.tampered: list[dict] = []
        self.inputs_tampered: list[str] = []
        self.timed_aliased: list[int] = []

    def check(self, where: str, timer_only: bool = False) -> None:
        changes = self.snapshot.changes(timer_only)
        if changes and len(self.tampered) < 5:
            self.tampered.append({"where": where, "what": changes[:12]})

    def report(self) -> dict:
        return {"tampered": self.tampered, "inputs_tampered": self.inputs_tampered,
                "timed_aliased": self.timed_aliased[:20],
                "threads": sorted(thread_names() - self.threads)[:10]}


FULL_CHECK_EVERY = 5  # unpaired timing: timed calls per full tripwire check


def round_ends(rounds: list[range], n_calls: int) -> set[int]:
    """The timed calls followed by the full tripwire check: each round's last, or every
    FULL_CHECK_EVERY-th and the last."""
    if rounds:
        return {r[-1] for r in rounds}
    return set(range(FULL_CHECK_EVERY - 1, n_calls, FULL_CHECK_EVERY)) | {n_calls - 1}


# (seed or None, inputs) for call i; negative i: an untimed call
Draw = Callable[[int], tuple[int | None, list]]


class TimedCalls:
    """`args(i)`, `call(*args)` and `on_output(i, out)` for timing.time_calls. `picks` calls,
    drawn after each returns, go to `recheck`; every output to `returned` (rechecks.py).
    `candidate=False` on the trusted side: no waiting for threads."""

    def __init__(self, model: Callable, watch: Watch, device: torch.device, draw: Draw,
                 round_ends: set[int], n_calls: int, picks: int = 0,
                 recheck: Callable[[list, int | None, list, int], None] | None = None,
                 candidate: bool = True, returned: Callable[[Any], None] | None = None):
        self.model, self.watch, self.device, self.draw = model, watch, device, draw
        self.candidate = candidate
        self.ledger = watch.ledger
        self.round_ends, self.left, self.wanted = round_ends, n_calls, picks
        self.recheck, self.returned = recheck, returned
        self.seed: int | None = None
        self.inputs: list | None = None
        self.timed = False

    def args(self, i: int) -> list:
        if i >= 0:  # untimed calls (warmup, a round's first: i < 0) synchronize on return
            self.ledger.device_idle()
        self.seed, fresh = self.draw(i)
        self.inputs = into_buffers(self.inputs, fresh)
        self.timed = i >= 0
        self.ledger.call_starts()
        return self.inputs

    def call(self, *args):
        out = self.model(*args)
        if self.candidate:  # the call is not over while the candidate's threads still work
            self.ledger.drain()
        if not self.timed:
            # its kernels are its own: waited for, so the next idle check sees only others
            sync(self.device)
            if self.returned is not None:
                self.returned(out)
        return out

    def untimed_ended(self) -> None:
        self.ledger.call_ended()

    def on_output(self, i: int, out) -> None:
        self.ledger.call_ended()
        if self.returned is not None:
            self.returned(out)
        tensors = output_tensors(out)
        if aliased_inputs(tensors, self.inputs):
            self.watch.timed_aliased.append(i)
        pick = self.wanted > 0 and secrets.randbelow(self.left) < self.wanted
        self.left -= 1
        # a re-check's save relies on more than the timer: the full check first
        self.watch.check(f"timed call {i}", timer_only=not pick and i not in self.round_ends)
        if pick and self.recheck is not None:
            self.wanted -= 1
            self.recheck(tensors, self.seed, self.inputs, i)
