"""The verdict gate: a wrong answer is judged before its timing step, not after it.

The child (child/gate.py) asks before it times; this thread has the reference server
compare its correctness outputs and answers `skip` when any is wrong, else `go`. Only
where outputs go through files: device buffers are read once, after the child.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable

from kb_eval.eval.child.gate import ASK, GO, POLL_S, SKIP
from kb_eval.eval.judge.references import ReferenceRun, ReferenceStore
from kb_eval.eval.judge.verdict import outputs_pass


class VerdictGate(threading.Thread):
    """Answers one child's question. `judge(labels)` returns the comparison's result
    and whether the outputs passed; `checked` keeps that result for the verdict."""

    def __init__(self, folder: Path, judge: Callable[[list[str]], tuple[object, bool]]):
        super().__init__(daemon=True, name="kb_eval-gate")
        self.folder, self.judge = Path(folder), judge
        self.checked: object | None = None  # the comparison that said skip (or go)
        self.skipped = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                asked = json.loads((self.folder / ASK).read_text())
            except (OSError, ValueError):
                self._done.wait(POLL_S)
                continue
            self._answer(asked)
            return

    def _answer(self, asked: object) -> None:
        passed = True
        if isinstance(asked, list):  # what was saved: the parent picks what to compare
            try:
                self.checked, passed = self.judge([x for x in asked if isinstance(x, str)])
            except Exception:  # noqa: BLE001 - ours: the child times as it would have
                self.checked, passed = None, True
        self.skipped = not passed
        (self.folder / (SKIP if self.skipped else GO)).write_text("")

    def close(self) -> None:
        """Stop waiting (the child has ended) and wait for an answer in progress."""
        self._done.set()
        self.join()


def start_gate(folder: Path, payload: dict,
               judge: Callable[[list[str]], tuple[object, bool]]) -> VerdictGate:
    """Gate this sample's timing step (adds `gate` to the child's payload)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (ASK, GO, SKIP):  # a retry's child starts afresh
        (folder / name).unlink(missing_ok=True)
    payload["gate"] = str(folder)
    gate = VerdictGate(folder, judge)
    gate.start()
    return gate


def correctness_check(refs: ReferenceStore, problem, cfg, trials: int, folder: Path,
                      device: str) -> Callable[[list[str]], tuple[ReferenceRun, bool]]:
    """The gate's judge: the sample's correctness trials compared from their files (never
    timing the reference alone: that is for after the timing step, when unpaired)."""
    def judge(_saved: list[str]) -> tuple[ReferenceRun, bool]:
        labels = [f"correct_{i}" for i in range(trials)]
        ref = refs.compare(problem, labels, folder, device, None, paired=True)
        if ref.error or ref.exchange_lost:
            return ref, True  # the comparison after the child meets it again
        return ref, outputs_pass(cfg, labels, ref)
    return judge


def compare_after(refs: ReferenceStore, problem, labels: list[str], folder: Path,
                  device: str, exchange, paired: bool, gate: VerdictGate | None) -> ReferenceRun:
    """The comparisons of `labels` once the child has ended, those the gate made reused."""
    pre = gate.checked if gate is not None else None
    if not isinstance(pre, ReferenceRun) or pre.error or pre.exchange_lost:
        return refs.compare(problem, labels, folder, device, exchange, paired=paired)
    rest = [lb for lb in labels if lb not in pre.diffs]
    if gate.skipped and not rest:
        return pre
    ref = refs.compare(problem, rest, folder, device, exchange, paired=paired)
    if ref.error or ref.exchange_lost:
        return ref
    return ReferenceRun(ref.state, {**pre.seen, **ref.seen}, {**pre.diffs, **ref.diffs},
                        ref.tolerance or pre.tolerance)
