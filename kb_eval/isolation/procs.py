"""Process hygiene for the parent: live children, killing process groups, reaping
orphans, and the /proc reads behind the memory and output limits. The parent never
trusts what a child says about itself: everything works from process groups, /proc and
file sizes."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kb_eval.isolation.handle import Child

MARKER = "KB_EVAL_SANDBOX"
# Which evaluator started a sandbox child: "<pid>:<start ticks>" (a pid alone can be
# reused). A child whose evaluator is gone is ended by the next run.
OWNER = "KB_EVAL_OWNER"
CHECK_S = 0.1  # how often memory and output size are checked


class Registry:
    """Children started and not yet ended (running or spare), across threads, and the
    zygotes (forkserver.py): pids the reapers must leave alone."""

    def __init__(self):
        self.lock = threading.Lock()
        self.children: set[Child] = set()
        self.kept: set[int] = set()

    def keep(self, pid: int) -> None:
        """Keep a zygote's pid (forkserver.py) out of the reapers' reach."""
        self._update(self.kept.add, pid)

    def unkeep(self, pid: int) -> None:
        """Stop keeping a pid: its zygote has been ended (ForkServer.close)."""
        self._update(self.kept.discard, pid)

    def add(self, child: Child) -> None:
        self._update(self.children.add, child)

    def discard(self, child: Child) -> None:
        self._update(self.children.discard, child)

    def _update(self, change, item) -> None:
        """One change to a set, under the lock that readers iterate it under."""
        with self.lock:
            change(item)

    def pids(self) -> set[int]:
        with self.lock:
            return {c.proc.pid for c in self.children} | self.kept

    def owned_by(self, thread_prefix: str) -> list[Child]:
        with self.lock:
            return [c for c in self.children if c.owner and c.owner.startswith(thread_prefix)]


LIVE = Registry()
# Held from a child's start until it is in LIVE, and by the reapers while they look for
# orphans: a child being started is never taken for one.
ADOPTING = threading.Lock()


STOPPING = threading.Event()  # set on Ctrl-C: no new child starts, waits for one end


class Stopped(RuntimeError):
    """The run is stopping: no child is started for this task."""


def stop_all() -> None:
    """A prompt stop (Ctrl-C, SIGTERM): from now on no child starts and no start is
    waited for (`STOPPING`); every running child is killed. `resume_starts` undoes it."""
    STOPPING.set()
    for child in LIVE.owned_by(""):
        killpg(child.proc.pid)


def resume_starts() -> None:
    """Children may start again (a new pool in this process)."""
    STOPPING.clear()


def kill_running(thread_prefix: str) -> int:
    """Kill the children working for threads named `thread_prefix*` (abandoned work, e.g.
    on Ctrl-C); their watchers see them exit at once and report them as crashed."""
    children = LIVE.owned_by(thread_prefix)
    for child in children:
        killpg(child.proc.pid)
    return len(children)


_SUBREAPER: bool | None = None


def become_subreaper() -> bool:
    """Orphans of our children re-parent to us (not init), so we can find and end them;
    whether we are a subreaper now."""
    global _SUBREAPER
    if _SUBREAPER is None:
        _SUBREAPER = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
            except (OSError, AttributeError):
                pass
    return _SUBREAPER


def killpg(pgid: int) -> None:
    """SIGKILL a whole process group (every child has its own session), if still there."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stat_fields(pid: int | str) -> list[str] | None:
    """A process's /proc/<pid>/stat after its name: [0] state, [1] ppid, [2] pgid,
    [3] session, [19] start time (clock ticks since boot), [21] rss pages; None when it
    is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_children() -> list[int]:
    """Pids whose parent is this process, from /proc (orphans re-parented to us included,
    which no Popen of ours knows about)."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(entry)) is not None and fields[1] == me:
            found.append(int(entry))
    return found


def reap_orphans() -> None:
    """Kill and reap re-parented descendants of sandbox children (they carry MARKER),
    pass after pass while a pass found some: a killed orphan's own children are orphaned
    only when it dies (ninja gives each command a process group of its own)."""
    if not sys.platform.startswith("linux"):
        return
    for _ in range(32):  # deeper than any process tree a build or a run makes
        if not _reap_once():
            return


def _reap_once() -> bool:
    """One pass over our re-parented children; whether it killed any."""
    killed = False
    with ADOPTING:
        known = LIVE.pids()
        for pid in proc_children():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if f"{MARKER}=1".encode() in environ and pid not in known:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    killed = True
                except (ProcessLookupError, ChildProcessError, PermissionError):
                    pass
    return killed


def _start_ticks(pid: int) -> str | None:
    """A process's start time (clock ticks since boot); None when it is gone."""
    fields = stat_fields(pid)
    return fields[19] if fields else None


def owner_tag() -> str:
    """This process as the OWNER of the children it starts."""
    return f"{os.getpid()}:{_start_ticks(os.getpid())}"


def owner_alive(tag: str) -> bool:
    """Whether the process an owner_tag names still runs."""
    pid, _, ticks = tag.partition(":")
    return pid.isdigit() and _start_ticks(int(pid)) == ticks


def end_orphans_of_dead_runs() -> list[int]:
    """Kill the process groups of this user's sandbox children whose evaluator (OWNER) is
    gone, left by a run killed outright; a SIGSTOPped one would hold its device memory
    for ever. Run at a pool's start."""
    if not sys.platform.startswith("linux"):
        return []
    uid, ended = os.getuid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        owner = next((v[len(OWNER) + 1:].decode(errors="replace") for v in environ
                      if v.startswith(f"{OWNER}=".encode())), None)
        if f"{MARKER}=1".encode() not in environ or owner is None or owner_alive(owner):
            continue
        try:
            pgid = os.getpgid(pid)
            if pgid != os.getpgid(0):
                killpg(pgid)
            os.kill(pid, signal.SIGKILL)
            ended.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return ended


def remove_left_by_dead(root: Path, prefix: str, keep: frozenset[str] = frozenset()) -> None:
    """Remove this user's folders `<prefix><pid>` under `root` whose process is gone (a
    run killed outright never removed its own), but those named in `keep`."""
    try:
        found = [p for p in root.iterdir() if p.name.startswith(prefix) and p.name not in keep]
    except OSError:
        return
    for old in found:
        pid = old.name[len(prefix):]
        try:
            mine = old.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


class ScratchDir:
    """This process's scratch folder kb_eval_<kind>_<pid> under $TMPDIR, named at first
    use, after removing those of processes that are gone."""

    def __init__(self, kind: str):
        self.kind = kind
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        if self._path is None:
            root, prefix = Path(os.environ.get("TMPDIR", "/tmp")), f"kb_eval_{self.kind}_"
            remove_left_by_dead(root, prefix)
            self._path = root / f"{prefix}{os.getpid()}"
        return self._path

    def remove(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def file_size(path: Path) -> int:
    """Size of a child's log (0 while it is missing): how output is measured and bounded."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


class GroupRss:
    """Resident memory per process group, from one pass over /proc shared by every
    watcher (a pass per watcher is too costly with many builds)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.taken = -1.0
        self.by_group: dict[int, int] = {}

    def group_mb(self, pgid: int) -> float:
        with self.lock:
            if time.monotonic() - self.taken >= CHECK_S / 2:
                self.by_group = rss_by_group()
                self.taken = time.monotonic()
            return self.by_group.get(pgid, 0) / 1024


def rss_by_group() -> dict[int, int]:
    """kB resident per process group, every process we can see."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    totals: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = stat_fields(entry)
        try:
            group = int(stat[2])
            totals[group] = totals.get(group, 0) + int(stat[21]) * page_kb
        except (TypeError, ValueError, IndexError):  # gone (None) or unreadable
            continue
    return totals


RSS = GroupRss()
