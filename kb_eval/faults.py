"""Fault injection for the tests of the evaluator's own failures (never set in real runs).

`$KB_EVAL_FAULTS` names a folder; a file there named after a point makes that point fail:
the point's code calls `inject_fault(point)`. A file whose text is `once` is removed as it
fires (the fault happens once, a retry then succeeds); one whose text is a number N fires
N times (counted down); any other file fires every time.
Points: `reference_kill` (the reference server kills itself in the middle of a sample),
`judge_exception` (an exception in the parent while it judges a sample), `setup_oom` (a
candidate's child runs out of device memory in its setup, before the candidate's code),
`draw_oom` (the child runs out of device memory drawing a correctness trial's inputs),
`round_oom` (the reference server runs out of device memory in a paired round),
`exchange_open` (a candidate's child cannot open the device buffers handed over for its
outputs), `compile_stall` (a compile of the candidate's own in its run child takes a
minute longer: `stall_if_armed`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

VAR = "KB_EVAL_FAULTS"


class InjectedFault(RuntimeError):
    pass


def _armed(point: str) -> bool:
    folder = os.environ.get(VAR)
    if not folder:
        return False
    path = Path(folder) / point
    try:
        text = path.read_text().strip()
    except OSError:
        return False
    left = 1 if text == "once" else int(text) if text.isdigit() else None
    if left is None:
        return True
    try:
        if left > 1:
            path.write_text(str(left - 1))
        else:
            path.unlink()
    except FileNotFoundError:
        return False  # another process fired it first
    return left > 0


def inject_fault(point: str, error: type[BaseException] = InjectedFault) -> None:
    """Fail here if the test armed this point: `*_kill` points SIGKILL this process,
    the others raise `error`."""
    if not _armed(point):
        return
    if point.endswith("_kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    raise error(f"injected fault at {point}")


def stall_if_armed(point: str, seconds: float) -> None:
    """Sleep `seconds` here if the test armed this point (a slow step, on purpose)."""
    if _armed(point):
        time.sleep(seconds)


def armed_folder() -> list[str]:
    """The folder of armed points, when a test armed any: children fire (and remove)
    them, so a sandbox lets them write there."""
    folder = os.environ.get(VAR)
    return [folder] if folder else []
