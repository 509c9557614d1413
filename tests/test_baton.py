"""torch's build lock in our children (eval/child/baton.py): a lock whose holder was
SIGKILLed is taken over at once; a live holder's is waited on, and a run's sweep leaves
it; a lock file not made by us is left alone. A cached C++ build whose lock a killed
child left still loads, and one whose builder was killed is built again: the candidate
is judged, not timed out (the `--resume` after a killed run that showed it)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.utils.file_baton import FileBaton

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.child import baton
from kb_eval.eval.schedule import build as build_step
from kb_eval.problems import load_problems
from kb_eval.timing import TimingSettings

HOLD = """
import sys, time
from torch.utils.file_baton import FileBaton
from kb_eval.eval.child import baton
from kb_eval.eval.schedule import build as build_step
baton.install()
print(FileBaton(sys.argv[1]).try_acquire(), flush=True)
time.sleep(600)
"""


def holder(lock: Path) -> subprocess.Popen:
    """A process that took the baton at `lock` (with our FileBaton) and holds it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE,
                            text=True, cwd=kit.REPO)
    assert proc.stdout.readline().strip() == "True"
    return proc


def killed_holder(lock: Path) -> None:
    proc = holder(lock)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert lock.read_bytes() == baton.MARK  # left behind, as a killed load leaves it


@pytest.fixture
def ours():
    saved = FileBaton.try_acquire, FileBaton.wait, FileBaton.release
    baton.install()
    yield
    FileBaton.try_acquire, FileBaton.wait, FileBaton.release = saved


def test_a_dead_holders_lock_is_taken(tmp_path, ours):
    lock = tmp_path / "lock"
    killed_holder(lock)
    b = FileBaton(str(lock))
    assert b.try_acquire()
    assert FileBaton(str(lock)).try_acquire() is False  # now ours, held
    b.release()
    assert not lock.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left


def test_a_live_holder_is_waited_for_until_it_dies(tmp_path, ours):
    lock = tmp_path / "lock"
    proc = holder(lock)
    try:
        b = FileBaton(str(lock), wait_seconds=0.05)
        assert b.try_acquire() is False
        assert lock.exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        started = time.monotonic()
        b.wait()  # the holder died while we waited: the wait ends
        assert time.monotonic() - started < 5
        assert not lock.exists()
    finally:
        proc.kill()


def test_a_lock_file_not_ours_is_left_to_torchs_rule(tmp_path, ours):
    lock = tmp_path / "lock"
    lock.write_text("")  # as torch's own FileBaton makes it: no mark, no flock
    assert FileBaton(str(lock)).try_acquire() is False
    assert lock.exists()


def test_another_hosts_lock_is_left_to_torchs_rule(tmp_path, ours):
    """On a cache shared between nodes a flock taken on another host may not show here:
    its lock file is waited on, and only a run's sweep by age removes it."""
    lock = tmp_path / "a" / "ext" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(baton.MARK.replace(socket.gethostname().encode(), b"another-node"))
    assert FileBaton(str(lock)).try_acquire() is False
    assert baton.remove_if_dead(lock) is False
    assert build_step.clear_batons(tmp_path, before=0.0) == 0  # younger than that: kept
    assert build_step.clear_batons(tmp_path, before=time.time() + 60) == 1


def test_a_holder_releases_only_its_own_lock_file(tmp_path, ours):
    lock = tmp_path / "lock"
    b = FileBaton(str(lock))
    assert b.try_acquire()
    lock.unlink()
    lock.write_text("")  # someone else's now (a sweep took ours: it must not take theirs)
    b.release()
    assert lock.exists() and b.fd is None


def test_where_links_fail_the_baton_is_torchs(tmp_path, ours, monkeypatch):
    """A file system without hard links (or flock): torch's O_EXCL baton, unmarked."""
    def no_links(src, dst):
        raise OSError(errno.EPERM, "links not supported here")

    monkeypatch.setattr(os, "link", no_links)
    lock = tmp_path / "lock"
    b = FileBaton(str(lock))
    assert b.try_acquire()
    assert lock.read_bytes() == b"" and FileBaton(str(lock)).try_acquire() is False
    b.release()
    assert not lock.exists() and list(tmp_path.iterdir()) == []


def test_a_runs_sweep_removes_a_dead_holders_lock_never_a_live_one(tmp_path):
    """The sweep at a run's end takes the locks made during it (build.clear_batons): a
    run beside it, sharing the cache, may hold one of ours made then, still building."""
    live, dead = tmp_path / "a" / "ext" / "lock", tmp_path / "b" / "ext" / "lock"
    for lock in (live, dead):
        lock.parent.mkdir(parents=True)
    killed_holder(dead)
    proc = holder(live)
    try:
        assert build_step.clear_batons(tmp_path, since=0.0) == 1
        assert live.exists() and not dead.exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert build_step.clear_batons(tmp_path) == 1  # whenever made, once its holder is gone
    assert not live.exists()


def _cached_build(tmp_path: Path, cache: Path):
    """A C++ candidate evaluated once (built, or found in the cache): what judges it
    again, and the folder load_inline builds it in."""
    problem = load_problems(str(kit.PROBLEMS), 1, "1")[0]
    source = (kit.CPP / "level1_problem1_sample0.py").read_text()
    config = EvalConfig(backend="cpp", live_baseline=True,
                        timing=TimingSettings(warmup=1, trials=3), correct_trials=2, jobs=1,
                        cache_dir=cache, results_dir=tmp_path / "r", run_timeout_s=45,
                        build_timeout_s=45)
    first, = evaluate([(problem, 0, source)], config)
    assert first.status == "correct", first.error
    ext = cache / "builds" / first.build.cache_key
    [build] = [d for d in ext.iterdir() if (d / "build.ninja").exists()]
    return (lambda sample: list(evaluate([(problem, sample, source)], config))[0]), ext, build


def test_a_cached_build_left_locked_by_a_killed_child_still_loads(tmp_path, build_cache_dir):
    judge, _, build = _cached_build(tmp_path, build_cache_dir)
    killed_holder(build / "lock")  # a child killed inside load_inline's up-to-date check
    again = judge(1)
    assert again.status == "correct", again.error
    assert again.build.cache_hit
    assert again.wall_s < 40  # not the run's time limit spent waiting on the lock
    assert not (build / "lock").exists()


def test_a_build_whose_builder_was_killed_is_built_again(tmp_path, build_cache_dir):
    """A run killed while its build child compiled: no cache entry, the lock left. The
    next run's build takes the lock over and builds; it was a build `timeout` before."""
    judge, ext, build = _cached_build(tmp_path, build_cache_dir)
    (ext / build_step.MARKER).unlink()  # the killed build wrote no cache entry
    killed_holder(build / "lock")
    again = judge(1)
    assert again.build.status == "ok" and not again.build.cache_hit, again.build
    assert again.status == "correct", again.error
    assert again.wall_s < 40
    assert (ext / build_step.MARKER).exists() and not (build / "lock").exists()
