"""What a run killed outright leaves behind, cleared when the next run starts: sandbox
processes whose evaluator is gone (isolation.end_orphans_of_dead_runs), /dev/shm folders
of pools that are gone, and invocation folders a dead evaluator of this machine marked
as its own (`owner`).
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
    # older runs' folders: kb_eval_<pid> (never this user's scratch root, kb_eval_<uid>)
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
