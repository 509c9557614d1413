"""What a run killed outright leaves, cleared by the next run's start
(kb_eval/eval/schedule/leftovers.py): sandbox processes whose evaluator is gone (a stopped
one included), /dev/shm output folders of dead pools, invocation folders a dead evaluator
of this machine marked as its own. Real processes and folders; nothing of a live run's,
another machine's or an unmarked folder is touched."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kb_eval.eval.schedule import leftovers
from kb_eval.eval.schedule.sample import RUN_SCRATCH, SHM
from kb_eval.isolation.procs import (MARKER, OWNER, end_orphans_of_dead_runs, owner_tag,
                                     remove_left_by_dead)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def _dead_tag() -> str:
    """The owner tag of a process that has ended (its pid and start time)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tag = f"{proc.pid}:" + Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    proc.kill()
    proc.wait()
    return tag


def _sandbox_child(owner: str) -> subprocess.Popen:
    env = {**os.environ, MARKER: "1", OWNER: owner}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env,
                            start_new_session=True)


def _gone(proc: subprocess.Popen, within_s: float = 10.0) -> bool:
    try:
        proc.wait(within_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_children_of_a_dead_evaluator_are_ended_even_stopped():
    orphan, stopped, ours = (_sandbox_child(_dead_tag()), _sandbox_child(_dead_tag()),
                             _sandbox_child(owner_tag()))
    try:
        time.sleep(0.5)  # their environments are in place
        stopped.send_signal(signal.SIGSTOP)  # as a paired timing leaves a candidate
        ended = end_orphans_of_dead_runs()
        assert {orphan.pid, stopped.pid} <= set(ended), ended
        assert _gone(orphan) and _gone(stopped)
        assert ours.pid not in ended and ours.poll() is None  # its evaluator (us) lives
    finally:
        for p in (orphan, stopped, ours):
            p.kill()
            p.wait()


def test_a_dead_runs_folders_go_and_the_new_one_is_marked(tmp_path):
    runs = tmp_path / "runs"
    host, dead = socket.gethostname(), _dead_tag()
    folders = {name: runs / name for name in ("dead", "alive", "elsewhere", "unmarked")}
    for name, folder in folders.items():
        (folder / "work").mkdir(parents=True)
    (folders["dead"] / leftovers.OWNER_FILE).write_text(f"{host} {dead}")
    (folders["alive"] / leftovers.OWNER_FILE).write_text(f"{host} {owner_tag()}")
    (folders["elsewhere"] / leftovers.OWNER_FILE).write_text(f"another-node {dead}")
    outputs = SHM / f"{RUN_SCRATCH}{dead.split(':')[0]}"  # a dead pool's output files
    outputs.mkdir(parents=True, exist_ok=True)
    (outputs / "x.out").write_bytes(b"0" * 1024)
    legacy = SHM / f"kb_eval_{dead.split(':')[0]}"  # the name such folders had before
    legacy.mkdir(exist_ok=True)
    mine = runs / "new"
    leftovers.clear_leftovers(mine)
    assert not folders["dead"].exists() and not outputs.exists() and not legacy.exists()
    assert all(folders[n].exists() for n in ("alive", "elsewhere", "unmarked"))
    assert (mine / leftovers.OWNER_FILE).read_text() == f"{host} {owner_tag()}"


def test_folders_of_dead_pids_go_but_those_kept(tmp_path):
    """remove_left_by_dead: `kb_eval_<uid>` (the scratch root of every run of this user)
    looks like a pid's folder, so it is named as kept."""
    dead, alive = _dead_tag().split(":")[0], str(os.getpid())
    for name in (f"kb_eval_{dead}", f"kb_eval_{alive}", "kb_eval_run_7x", "other_1"):
        (tmp_path / name).mkdir()
    kept_dead = tmp_path / f"kb_eval_{_dead_tag().split(':')[0]}"
    kept_dead.mkdir()
    remove_left_by_dead(tmp_path, "kb_eval_", keep=frozenset({kept_dead.name}))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"kb_eval_{alive}", "kb_eval_run_7x", "other_1", kept_dead.name])


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_another_users_folder_is_never_removed(tmp_path):
    """Run as root, the sweep could remove anything: it takes only this user's folders."""
    theirs = tmp_path / f"kb_eval_{_dead_tag().split(':')[0]}"
    theirs.mkdir()
    os.chown(theirs, 54321, 54321)
    remove_left_by_dead(tmp_path, "kb_eval_")
    assert theirs.exists()
