"""Where a candidate's child is, for its parent (`phase`, `progress` files), and `Laps`,
an account of where the time went."""

from __future__ import annotations

from pathlib import Path

from kb_eval import clocks

# steps charged to no budget (wait) or holding no place on the device (compile)
WAIT, COMPILE = "wait", "compile"
_last = [""]  # the last step marked (one run child per process)


def set_phase(workdir: Path, phase: str) -> None:
    (workdir / "phase").write_text(phase)


def mark(workdir: Path, step: str) -> None:
    """Where the child is, for the lane's time budgets (schedule/overlap.py)."""
    (workdir / "progress").write_text(step)
    _last[0] = step


def last_step() -> str:
    return _last[0]


class Laps:
    """Seconds per named step, charged lap by lap."""

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
