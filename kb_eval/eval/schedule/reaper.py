"""Processes that outlive their sandbox child without its marker (KB_EVAL_SANDBOX=1): a
descendant that exec'ed with a clean environment and left its session. `sweep_escapees`
ends direct children isolation does not know, in another session, older than
`min_age_s`; run after each candidate child, and with no age limit when the pool closes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import kb_eval.isolation as isolation


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _uptime_s() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _escapees(my_session: int, min_age_s: float) -> list[int]:
    """Unknown live direct children in foreign sessions, older than `min_age_s`; dead
    unknown ones are reaped on the way."""
    known, now, hz, found = isolation._LIVE.pids(), _uptime_s(), os.sysconf("SC_CLK_TCK"), []
    for pid in isolation._proc_children():
        fields = isolation.procs.stat_fields(pid)
        if pid in known or fields is None:
            continue
        if fields[0] == "Z":  # already dead (e.g. killed with its group): just reap
            _reap(pid)
            continue
        # fields: [0] state, [3] session, [19] start time (clock ticks since boot)
        if int(fields[3]) == my_session or now - int(fields[19]) / hz < min_age_s:
            continue
        found.append(pid)
    return found


def sweep_escapees(min_age_s: float = 0.1, rounds: int = 5) -> list[int]:
    """Kill and reap unknown live direct children in foreign sessions (returns their
    pids); reap dead ones silently."""
    if not sys.platform.startswith("linux"):
        return []
    killed: list[int] = []
    my_session = os.getsid(0)
    for _ in range(rounds):  # an escapee's own children re-parent to us once it dies
        with isolation.procs.ADOPTING:  # a child being adopted from a zygote is not one
            found = _escapees(my_session, min_age_s)
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                _reap(pid)
        killed += found
        if not found:
            break
        time.sleep(0.05)
    return killed
