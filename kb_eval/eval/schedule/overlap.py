"""Several candidate children per device, and the time budgets that keep one from holding
its lane.

A device runs up to `lane_depth` samples at once (pool.py starts that many lane threads
per device); their children start, load, compile and run correctness side by side, and
the device's timing lock (kb_eval/devlock.py) makes each timing step run alone.
`DeviceSlots` narrows that per problem with the memory plan: a child is counted at three
times the reference's footprint (its inputs and outputs, the copies it stages, and the
reference server comparing another sample beside it), and a problem of which fewer than
`lane_depth` such fit in what the device offers takes as many slots as that leaves it
(one that fits once runs with no neighbour).

`Budgets` reads where the child says it is (its `progress` file, child/worker.py `mark`)
and names the budget it overran: the load budget for the candidate's import, init and
first call, the per-call budget for each later call (the timing step: per call it
makes). Waiting for the timing lock is not charged. The child writes that file itself,
so a candidate could lie about its progress: the budgets are for throughput, and the run
timeout stays the hard limit.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kb_eval.eval.config import EvalConfig

PROGRESS = "progress"
CHILD_FOOTPRINT = 3  # a child in flight, in reference footprints (module docstring)


class DeviceSlots:
    """Up to `depth` samples in flight on one device; a wide one takes several slots (and
    new narrow ones wait behind it, so it is not starved)."""

    def __init__(self, depth: int):
        self.depth, self.used, self.wide_waiting = depth, 0, 0
        self.cond = threading.Condition()

    def width(self, need_bytes: int | None, free_bytes: int | None) -> int:
        """Slots a sample of this footprint takes (module docstring)."""
        if not need_bytes or not free_bytes:
            return 1
        fit = max(1, free_bytes // (CHILD_FOOTPRINT * need_bytes))
        return min(self.depth, -(-self.depth // fit))

    @contextmanager
    def held(self, width: int) -> Iterator[None]:
        wide = width > 1
        with self.cond:
            self.wide_waiting += wide
            self.cond.wait_for(lambda: self.used + width <= self.depth
                               and (wide or not self.wide_waiting))
            self.wide_waiting -= wide
            self.used += width
        try:
            yield
        finally:
            with self.cond:
                self.used -= width
                self.cond.notify_all()


class Budgets:
    """The budget check of one candidate child (Child.watch's `budget`)."""

    def __init__(self, run_dir: Path, cfg: EvalConfig):
        self.path = run_dir / PROGRESS
        self.path.unlink(missing_ok=True)  # a retry's child starts with no progress
        timing = cfg.timing
        calls = timing.warmup + timing.trials + 2  # the discarded first call, the floor
        self.limits = {"load": (cfg.load_budget_s, "load"),
                       "call": (cfg.call_budget_s, "per-call"),
                       # paired rounds time the reference too: room for twice the calls
                       "timing": (2 * calls * cfg.call_budget_s, "timing"),
                       "probe": (cfg.call_budget_s, "per-call")}
        self.run_s = cfg.run_timeout_s
        self.step, self.since = "", time.monotonic()
        self.start, self.waited = self.since, 0.0

    def __call__(self) -> str | None:
        try:
            step = self.path.read_text()[:40].strip()
        except OSError:
            step = self.step
        now = time.monotonic()
        if step != self.step:
            if self.step == "wait":
                self.waited += now - self.since
            self.step, self.since = step, now
        ran = now - self.start - self.waited - (now - self.since if step == "wait" else 0)
        if ran > self.run_s:  # the run timeout, less the time queued for the lock
            return f"over the run timeout ({self.run_s:g} s, not counting waits for the lock)"
        limit, name = self.limits.get(step.partition(" ")[0], (None, ""))
        if limit is None or now - self.since <= limit:
            return None
        return f"over its {name} budget ({limit:g} s in '{step}')"
