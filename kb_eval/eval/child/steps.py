"""Where a candidate's child is, for its parent: the `phase` file (where a child that died
was) and the `progress` file (the lane's time budgets and places: schedule/overlap.py),
and `Laps`, its own account of where the time went."""

from __future__ import annotations

from pathlib import Path

from kb_eval import clocks

# The progress steps the lane treats apart from the others (overlap.Budgets): a wait for
# the device's lock is charged to no budget, and a compile holds no place on the device.
WAIT, COMPILE = "wait", "compile"
_last = [""]  # the last step marked (one run child per process)


def set_phase(workdir: Path, phase: str) -> None:
    (workdir / "phase").write_text(phase)


def mark(workdir: Path, step: str) -> None:
    """Where the child is, for the lane's time budgets (schedule/overlap.py): `wait` (for
    the device's lock: not charged), `setup`, `load` (the candidate's import, init and
    first call), `compile` (a build of the candidate's: charged to the step it
    interrupts, holding no place), `call i`, `timing`, `probe`."""
    (workdir / "progress").write_text(step)
    _last[0] = step


def last_step() -> str:
    return _last[0]


class Laps:
    """Seconds per named step, charged lap by lap: where a sample's time goes (the parent's
    account on the record, and a child's own account of its steps)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.mark = clocks.monotonic()

    def restart(self) -> None:
        """Start the next lap now (the time since the last one is not charged)."""
        self.mark = clocks.monotonic()

    def lap(self, step: str) -> float:
        now = clocks.monotonic()
        spent, self.mark = now - self.mark, now
        self.seconds[step] = round(self.seconds.get(step, 0.0) + spent, 3)
        return spent
