"""DeviceSlots (eval/schedule/overlap.py): which samples a device runs at once, by count
and by memory, and when a later sample may pass one waiting for room."""

from __future__ import annotations

import threading
import time

from kb_eval.eval.config import EvalConfig
from kb_eval.eval.schedule.overlap import (CHILD_FOOTPRINT, PROGRESS, Budgets, Charge,
                                           DeviceSlots, lanes_per_device)


class Sample:
    """A lane thread holding a place for one sample until `end()`."""

    def __init__(self, slots: DeviceSlots, child: int, free: int = 10, server: int = 0):
        self.started, self.done = threading.Event(), threading.Event()
        before = len(slots.waiting) + len(slots.running)
        charge = Charge(child, server, free)
        self.thread = threading.Thread(target=self._run, args=(slots, charge), daemon=True)
        self.thread.start()
        # it has its ticket (in line or running) before the next sample comes
        _until(lambda: len(slots.waiting) + len(slots.running) > before)

    def _run(self, slots: DeviceSlots, charge: Charge) -> None:
        with slots.held(charge) as self.slot:
            self.started.set()
            self.done.wait(10)

    def end(self) -> None:
        self.done.set()
        self.thread.join(10)

    @property
    def running(self) -> bool:
        """It started (given a few seconds: a loaded CI machine schedules threads late)."""
        return self.started.wait(5)

    @property
    def waiting(self) -> bool:
        """It has not started, 0.2 s on."""
        return not self.started.wait(0.2)


def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_no_more_than_depth_in_flight():
    slots = DeviceSlots(3)
    first = [Sample(slots, 0, 0) for _ in range(3)]
    fourth = Sample(slots, 0, 0)
    assert all(s.running for s in first) and fourth.waiting
    first[1].end()
    assert fourth.running


def test_charges_in_flight_stay_within_the_free_memory():
    slots = DeviceSlots(3)
    a = Sample(slots, 6)
    b = Sample(slots, 6)  # 12 > 10: waits though a lane is free
    assert a.running and b.waiting
    a.end()
    assert b.running


def test_a_sample_larger_than_the_device_runs_alone_and_is_not_passed():
    slots = DeviceSlots(3)
    a = Sample(slots, 2)
    huge = Sample(slots, 20)
    small = Sample(slots, 1)  # fits beside `a`, but `huge` could never start beside it
    assert a.running and huge.waiting and small.waiting
    a.end()
    assert huge.running and small.waiting
    huge.end()
    assert small.running


def test_a_later_sample_passes_one_waiting_for_room_without_delaying_it():
    slots = DeviceSlots(3)
    a = Sample(slots, 6)
    head = Sample(slots, 8)  # 14 > 10: waits for `a`
    x = Sample(slots, 2)  # fits beside `a`, and beside `head` once `a` ends: passes
    y = Sample(slots, 2)  # would leave no room for `head` beside `x`: waits its turn
    assert a.running and x.running
    assert head.waiting and y.waiting
    a.end()
    assert head.running  # started once `a` ended, `x` beside it
    assert y.waiting  # 2 + 8 + 2 > 10
    x.end()
    assert y.running


def test_nothing_passes_a_waiting_sample_that_fits():
    """Waiting for a lane, not for room: a later sample never takes the lane first."""
    slots = DeviceSlots(2)
    a, b = Sample(slots, 1), Sample(slots, 1)
    head, later = Sample(slots, 1), Sample(slots, 1)
    a.end()
    assert head.running and later.waiting


def test_the_server_is_charged_once_for_the_samples_in_flight():
    """Each child holds its own share; the server works for one sample at a time."""
    slots = DeviceSlots(3)
    a = Sample(slots, 3, server=3)
    b = Sample(slots, 3, server=3)  # 3 + 3 + 3: fits
    c = Sample(slots, 3, server=3)  # 3 + 3 + 3 + 3 > 10: waits
    assert a.running and b.running and c.waiting
    a.end()
    assert c.running


def test_unknown_sizes_are_limited_by_depth_alone():
    slots = DeviceSlots(3)
    a = Sample(slots, 9)  # known: 9 of 10
    b = Sample(slots, 0, 0)  # a plan that found no sizes: starts beside it all the same
    c = Sample(slots, 0, 0)
    d = Sample(slots, 0, 0)
    assert a.running and b.running and c.running and d.waiting
    assert Charge.of(None, 5, None, 80) == Charge() == Charge.of(4, 1, None, None)


def test_charges_from_the_plan_and_lanes_waiting_beside_depth():
    gib = 1 << 30
    c = Charge.of(8 * gib, gib, None, 74 * gib)
    assert c.child == CHILD_FOOTPRINT * 8 * gib + gib and c.server == CHILD_FOOTPRINT * 8 * gib
    assert Charge.of(8 * gib, 0, 40 * gib, 74 * gib).server == 40 * gib  # the float64 truth
    # KernelBench's 8 GiB problems (children at 24 GiB on the H100): two at a time in 74 GiB
    slots = DeviceSlots(3)
    runs = [Sample(slots, c.child, c.free, c.server) for _ in range(3)]
    assert runs[0].running and runs[1].running and runs[2].waiting
    assert lanes_per_device(1) == 1  # one in flight: nothing can pass anything
    assert lanes_per_device(3) > 3


def test_a_sample_past_its_timing_gives_its_place_but_keeps_its_charge():
    slots = DeviceSlots(2)
    a, b = Sample(slots, 4, 12), Sample(slots, 4, 12)
    c = Sample(slots, 4, 12)  # the depth holds it back
    assert a.running and b.running and c.waiting
    a.slot.timed()  # a's child re-checks and probes now: c may start beside it
    assert c.running
    b.slot.timed()
    d = Sample(slots, 1, 12)  # a place is free (c in flight) but not the memory: a, b hold 8
    assert d.waiting
    a.end()
    assert d.running


def test_a_sample_of_unknown_size_keeps_its_place_past_its_timing():
    slots = DeviceSlots(1)
    a = Sample(slots, 0, 0)
    b = Sample(slots, 0, 0)
    a.slot.timed()
    assert b.waiting  # the depth alone limits such samples: a still counts
    a.end()
    assert b.running


def test_a_sample_of_unknown_size_waits_for_those_past_their_timing():
    """Past its timing a sample of known size gives its place to one of known size, whose
    memory is checked; one of unknown size is limited by the depth alone, so it counts
    every child alive."""
    slots = DeviceSlots(2)
    a, x = Sample(slots, 4, 12), Sample(slots, 4, 12)
    a.slot.timed()
    b = Sample(slots, 0, 0)
    assert b.waiting  # a's child still runs: two alive
    d = Sample(slots, 4, 12)  # of known size: it fits beside a's charge (and passes b)
    assert d.running and b.waiting
    a.end()
    d.end()
    assert b.running


def test_a_retry_takes_a_place_again_once_one_is_free():
    slots = DeviceSlots(1)
    a = Sample(slots, 2)
    a.slot.timed()
    b = Sample(slots, 2)
    assert b.running
    retook = threading.Event()
    threading.Thread(target=lambda: (a.slot.retake(), retook.set()), daemon=True).start()
    assert not retook.wait(0.2)  # b holds the only place
    b.end()
    assert retook.wait(5)
    c = Sample(slots, 2)
    assert c.waiting  # a's retry holds the place again
    a.end()
    assert c.running


def test_lanes_past_their_timing_take_no_more_than_the_intake_allows():
    slots = DeviceSlots(3)
    claims = [slots.intake() for _ in range(slots.intake_cap)]
    dones = [c.__enter__() for c in claims]
    assert slots.intake_cap == 3 + 2
    took = threading.Event()

    def lane():
        with slots.intake():
            took.set()
    threading.Thread(target=lane, daemon=True).start()
    assert not took.wait(0.2)  # every intake is before or in its timing
    dones[0]()  # that sample left its timing step
    assert took.wait(5)
    dones[0]()  # told twice (timing, then the block's end): freed once
    assert slots.taken == slots.intake_cap - 1
    for c in claims:
        c.__exit__(None, None, None)
    assert slots.taken == 0


def test_budgets_tell_the_sample_when_its_child_leaves_its_timing_step(tmp_path):
    told = []
    budgets = Budgets(tmp_path, EvalConfig(), lambda: told.append(1))
    for step in ["setup", "call 1", "wait", "timing"]:
        (tmp_path / PROGRESS).write_text(step)
        assert budgets() is None
    assert not told
    (tmp_path / PROGRESS).write_text("wait")
    budgets()
    (tmp_path / PROGRESS).write_text("probe")
    budgets()
    assert told == [1]


def test_a_sample_past_its_timing_hands_on_its_place_and_its_lanes_intake(tmp_path):
    """SampleTask.past_timing, which the sample's Budgets call (schedule/sample.py)."""
    from kb_eval.eval.schedule.sample import SampleTask
    from kb_eval.problems import Problem

    slots = DeviceSlots(1)
    a = Sample(slots, 2)
    with slots.intake() as done:
        task = SampleTask(problem=Problem(source="s", level=1, problem_id=1, name="P",
                                          code=""), sample=0, turn=0, source="",
                          workdir=tmp_path, slot=a.slot, intake_done=done)
        assert slots.taken == 1
        b = Sample(slots, 2)
        assert b.waiting
        task.past_timing()
        assert b.running and slots.taken == 0
    a.end()
    b.end()
