"""Several candidate children per device, and the time budgets that keep one from holding
its lane.

A device runs up to `lane_depth` samples at once; its timing lock (devlock.py) makes each
timing step run alone. `DeviceSlots` keeps the samples within the device's memory
(`Charge`: three reference footprints and the output buffers per child; the reference
server's largest need). A later sample may pass a waiting one only when that cannot delay
it. A sample past its timing step or compiling gives its place back, keeping its charge.
`Budgets` reads where the child says it is (its `progress` file) and names the budget it
overran (load, per-call, timing); a lie there only costs throughput: the run timeout
stays the hard limit.
"""

from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from kb_eval.eval.child.steps import COMPILE, WAIT
from kb_eval.eval.config import EvalConfig

PROGRESS = "progress"
CHILD_FOOTPRINT = 3  # a child in flight, in reference footprints (module docstring)
# Samples a device's lanes hold waiting beside those in flight, so a later one can pass
# one waiting for room.
WAITING_LANES = 2


def intake_cap(depth: int) -> int:
    """Samples a device's lanes hold before or in their timing step (DeviceSlots.intake)."""
    return depth + (WAITING_LANES if depth > 1 else 0)


def lanes_per_device(depth: int) -> int:
    """Lane threads of a device: `depth` in flight, as many past their timing (their
    places given back: `Slot.timed`), and (depth > 1) a few waiting."""
    return depth + (depth + WAITING_LANES if depth > 1 else 0)


@dataclass(frozen=True)
class Charge:
    """A sample's claim on its device's memory, in bytes (0: unknown, the depth alone
    limits it)."""
    child: int = 0  # its candidate child, with the output buffers the server holds for it
    server: int = 0  # the reference server's task for it
    free: int = 0  # what its plan found the device offers

    @classmethod
    def of(cls, need: int | None, exchange: int, truth: int | None,
           free: int | None) -> "Charge":
        if not need or not free:
            return cls()
        return cls(CHILD_FOOTPRINT * need + exchange, max(CHILD_FOOTPRINT * need, truth or 0),
                   free)


def _total(charges: list[Charge]) -> int:
    """Memory these samples may hold at once: every child, and the server for one."""
    return sum(c.child for c in charges) + max((c.server for c in charges), default=0)


class DeviceSlots:
    """Samples in flight on one device: at most `depth`, and their charges within the
    memory the plan offers."""

    def __init__(self, depth: int):
        self.depth = depth
        self.cond = threading.Condition()
        self.tickets = itertools.count()
        self.waiting: list[_Sample] = []  # in the order they came
        self.running: dict[int, _Sample] = {}  # by ticket
        # Samples the device's lanes took that are not past their timing (`intake`): the
        # lanes past theirs take no more, so one device does not hoard a run's samples.
        self.intake_cap = intake_cap(depth)
        self.taken = 0

    @contextmanager
    def intake(self) -> Iterator[Callable[[], None]]:
        """A lane's turn to take a sample, once fewer than `intake_cap` of the device's
        are before or in their timing. Yields `done`, to call when the sample is past
        its timing; the block's end calls it at the latest."""
        with self.cond:
            self.cond.wait_for(lambda: self.taken < self.intake_cap)
            self.taken += 1
        released = False

        def done() -> None:
            nonlocal released
            with self.cond:
                if not released:
                    released, self.taken = True, self.taken - 1
                    self.cond.notify_all()
        try:
            yield done
        finally:
            done()

    @contextmanager
    def held(self, charge: Charge) -> Iterator["Slot"]:
        """Hold a place for a sample of this charge while the block runs (or until the
        block calls the slot's `timed`), and its charge until the block ends."""
        me = _Sample(next(self.tickets), charge)
        with self.cond:
            self.waiting.append(me)
            self.cond.wait_for(lambda: self._may_start(me))
            self.waiting.remove(me)
            self.running[me.ticket] = me
            self.cond.notify_all()  # the next in line may start beside it, or pass it
        try:
            yield Slot(self, me)
        finally:
            with self.cond:
                del self.running[me.ticket]
                self.cond.notify_all()

    def _in_flight(self) -> list["_Sample"]:
        """The samples running that hold a place (not past their timing, not compiling)."""
        return [r for r in self.running.values() if r.in_place]

    def _fits(self, s: "_Sample") -> bool:
        """Whether `s` fits beside the samples running (one of unknown size: the depth
        alone limits it, counting every child alive but a compiling one)."""
        running = list(self.running.values())
        alive = [r for r in running if not r.compiling]
        if len(self._in_flight() if s.charge.free else alive) >= self.depth:
            return False
        return (not running or not s.charge.free  # unknown: the depth alone limits it
                or _total([r.charge for r in running + [s]]) <= s.charge.free)

    def _may_start(self, me: "_Sample") -> bool:
        """The first waiting sample starts as soon as it fits; a later one may pass it only
        while it does not, and only if it, the first one and those that passed it fit together."""
        head = self.waiting[0]
        if me is head:
            return self._fits(me)
        if self._fits(head) or not self._fits(me):
            return False
        passed = [r for r in self.running.values() if r.ticket > head.ticket]
        return (len([r for r in passed if r.in_place]) + 2 <= self.depth
                and (not head.charge.free
                     or _total([r.charge for r in passed + [me, head]]) <= head.charge.free))


@dataclass
class _Sample:
    ticket: int
    charge: Charge
    timed: bool = False  # past its timing step: its place given back, its charge kept
    compiling: bool = False  # its child compiles: no place held meanwhile, its charge kept

    @property
    def in_place(self) -> bool:
        return not (self.timed or self.compiling)


class Slot:
    """A sample's hold on its device (DeviceSlots.held)."""

    def __init__(self, slots: DeviceSlots, sample: _Sample):
        self.slots, self.sample = slots, sample

    def timed(self) -> None:
        """The sample's timing step is over: its place goes to the next sample, its
        memory charge stays until it ends. A sample of unknown size keeps its place (the
        depth alone limits those)."""
        if not self.sample.charge.free:
            return
        with self.slots.cond:
            self.sample.timed = True
            self.slots.cond.notify_all()

    def compiling(self, on: bool) -> None:
        """The sample's child started (on) or ended a compile of the candidate's own: its
        place goes to the next sample meanwhile, its charge stays; ended, it goes on
        without waiting for a place."""
        with self.slots.cond:
            self.sample.compiling = on
            self.slots.cond.notify_all()

    def retake(self) -> None:
        """Hold a place again (a retry's child), once one is free."""
        with self.slots.cond:
            if not self.sample.in_place:  # out of place until retaken
                self.sample.compiling, self.sample.timed = False, True
                self.slots.cond.wait_for(
                    lambda: len(self.slots._in_flight()) < self.slots.depth)
                self.sample.timed = False


class Budgets:
    """The budget check of one candidate child (Child.watch's `budget`)."""

    def __init__(self, run_dir: Path, cfg: EvalConfig,
                 timed: Callable[[], None] = lambda: None,
                 compiling: Callable[[bool], None] = lambda on: None):
        self.path = run_dir / PROGRESS
        self.timed = timed  # called when the child leaves its timing step
        self.compiling = compiling  # called as the child starts (True) or ends a compile
        self.path.unlink(missing_ok=True)  # a retry's child starts with no progress
        timing = cfg.timing
        calls = timing.warmup + timing.trials + 2  # the discarded first call, the floor
        self.limits = {"load": (cfg.load_budget_s, "load"),
                       "call": (cfg.call_budget_s, "per-call"),
                       # paired rounds time the reference too: room for twice the calls
                       "timing": (2 * calls * cfg.call_budget_s, "timing"),
                       "probe": (cfg.call_budget_s, "per-call")}
        self.run_s = cfg.run_timeout_s
        self.step, self.since = "", time.monotonic()  # the child's last word, since when
        self.charged, self.spent = "", 0.0  # the budgeted step, its seconds before `since`
        self.start, self.waited = self.since, 0.0

    def __call__(self) -> str | None:
        try:
            step = self.path.read_text()[:40].strip()
        except OSError:
            step = self.step
        now = time.monotonic()
        if step != self.step:
            self._moved(step, now)
        ran = now - self.start - self.waited - (now - self.since if step == WAIT else 0)
        if ran > self.run_s:  # the run timeout, less the time queued for the lock
            return f"over the run timeout ({self.run_s:g} s, not counting waits for the lock)"
        limit, name = self.limits.get(self.charged.partition(" ")[0], (None, ""))
        spent = self.spent + (0.0 if step == WAIT else now - self.since)
        if limit is None or spent <= limit:
            return None
        where = f"{self.charged}', compiling" if step == COMPILE else f"{self.charged}'"
        return f"over its {name} budget ({limit:g} s in '{where})"

    def _moved(self, step: str, now: float) -> None:
        """The child's word changed to `step`: a wait is charged to nothing, a compile to
        the step it interrupted, and a step resumed after either goes on with its budget."""
        if self.step == WAIT:
            self.waited += now - self.since
        else:
            self.spent += now - self.since
        if self.step == "timing":
            self.timed()
        if (self.step == COMPILE) != (step == COMPILE):
            self.compiling(step == COMPILE)
        if step not in (WAIT, COMPILE) and step != self.charged:
            self.charged, self.spent = step, 0.0
        self.step, self.since = step, now
