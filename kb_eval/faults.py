"""Fault injection for the tests of the evaluator's own failures (never set in real runs).

`$KB_EVAL_FAULTS` names a folder; a file there named after a point makes the
`inject_fault(point)` there fail: text `once` fires once, a number N fires N times, any
other text every time. Points: reference_kill, judge_exception, setup_oom, draw_oom,
round_oom, exchange_open, compile_stall (`stall_if_armed`).
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
    """The folder of armed points, if any: a sandbox lets children write there (they
    fire and remove them)."""
    folder = os.environ.get(VAR)
    return [folder] if folder else []
