"""What a run killed outright leaves behind, cleared when the next run starts.

A run ended by SIGKILL (a benchmark's timeout, the OOM killer, a lost session) never
reaches the exit handlers that end its children and remove its scratch. It leaves:
- sandbox children, a candidate among them stopped (SIGSTOP) for its paired timing's
  reference rounds, which stays stopped for ever with its device memory held;
- its candidates' output files in /dev/shm (gigabytes a sample for large problems) and
  its invocation folder (reference outputs, locks).
The next run's memory plans then find the device short and its output files go to disk.
A run started right after one killed that way was several times slower
(docs/PERFORMANCE.md; likely this cause, not shown).

So a pool, as it starts, ends this user's sandbox processes whose evaluator is gone
(isolation.end_orphans_of_dead_runs: each child carries its evaluator's pid and start
time), removes the /dev/shm output folders of pools that are gone, and removes the
invocation folders that a dead evaluator of this machine marked as its own (`owner`): a
Ray lane's copy of a run's folder on another node carries no mark and is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from kb_eval.eval.schedule.sample import RUN_SCRATCH, SHM
from kb_eval.isolation.procs import (end_orphans_of_dead_runs, owner_alive, owner_tag,
                                     remove_left_by_dead)

OWNER_FILE = "owner"  # in an invocation folder: "<host> <pid>:<start ticks>"


def clear_leftovers(invocation_dir: Path) -> list[int]:
    """Clear what dead runs left (module docstring), then mark `invocation_dir` as this
    process's. Returns the pids of the processes ended."""
    ended = end_orphans_of_dead_runs()
    remove_left_by_dead(SHM, RUN_SCRATCH)
    # named kb_eval_<pid> before 2026-11-27 (never this user's scratch root, kb_eval_<uid>)
    remove_left_by_dead(SHM, "kb_eval_", keep=frozenset({f"kb_eval_{os.getuid()}"}))
    host = socket.gethostname()
    try:
        runs = [d for d in invocation_dir.parent.iterdir() if d != invocation_dir]
    except OSError:
        runs = []
    for run in runs:
        try:
            their_host, tag = (run / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue  # unmarked: another node's copy, or a run before the mark
        if their_host == host and not owner_alive(tag):
            shutil.rmtree(run, ignore_errors=True)
    invocation_dir.mkdir(parents=True, exist_ok=True)
    (invocation_dir / OWNER_FILE).write_text(f"{host} {owner_tag()}")
    return ended
