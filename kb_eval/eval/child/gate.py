"""The candidate's side of the verdict gate (schedule/gate.py): a wrong answer is not
timed, as its timing step would hold the device alone for nothing."""

from __future__ import annotations

import json
from pathlib import Path

from kb_eval import clocks
from kb_eval.devlock import DeviceLock
from kb_eval.eval.child.steps import WAIT, mark

ASK, GO, SKIP = "ask", "go", "skip"
WAIT_S = 600.0  # the parent answers within one reference comparison
POLL_S = 0.002


def may_time(folder: Path, labels: list[str], lock: DeviceLock, workdir: Path) -> bool:
    """Ask the parent about the saved correctness outputs, the lock let go: False when they
    are wrong; no answer in time times as before."""
    mark(workdir, WAIT)
    lock.release()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{ASK}.tmp").write_text(json.dumps(labels))
    (folder / f"{ASK}.tmp").rename(folder / ASK)
    deadline = clocks.monotonic() + WAIT_S
    while clocks.monotonic() < deadline:
        if (folder / SKIP).exists():
            return False
        if (folder / GO).exists():
            return True
        clocks.sleep(POLL_S)
    return True
