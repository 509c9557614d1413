"""torch's build lock, made to outlive no holder.

`load_inline` holds `<build dir>/lock` (cpp_extension's FileBaton: a file made with
O_EXCL, removed on release) around every build and every up-to-date check of a build, and
any other process that finds the file waits until it is gone. A holder killed in between
(a time limit, a killed run, Ctrl-C) left the file for good, and every later load of that
build waited until its own time limit: a `timeout` charged to the candidate for a kill of
ours (seen: a run killed while a child loaded a cached build, then `--resume`).

In our children the lock file is born locked: written beside its place with a mark,
flock'ed, then hard-linked into place (atomic like O_EXCL). The kernel drops a flock when
its holder dies, so a marked lock file whose flock can be taken belongs to a dead holder;
it is removed and the baton taken (or waited for again). A lock file without the mark
(torch's own, another program's) is waited on as torch does; the run's sweep of old
locks (schedule/build.py: clear_batons) is for those.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

MARK = b"kb-eval baton: flock'ed by its holder\n"
_TRIES = 3  # a lock file replaced under us this often in a row: someone else holds it


def install() -> None:
    """Make torch's FileBaton ours in this process (idempotent)."""
    from torch.utils.file_baton import FileBaton

    if FileBaton.try_acquire is not try_acquire:
        FileBaton.try_acquire, FileBaton.wait, FileBaton.release = try_acquire, wait, release


def try_acquire(self) -> bool:
    for _ in range(_TRIES):
        fd = _make_locked(self.lock_file_path)
        if fd is not None:
            self.fd = fd
            return True
        if remove_if_dead(self.lock_file_path) is False:
            return False
    return False


def wait(self) -> None:
    # torch then imports the build: if its dead holder left it half made, that import
    # fails with an error instead of waiting forever
    while os.path.exists(self.lock_file_path):
        time.sleep(self.wait_seconds)
        remove_if_dead(self.lock_file_path)


def release(self) -> None:
    # removed before the flock goes: whoever takes the flock then finds the file gone
    # (or another holder's), never this live holder's file to remove
    os.remove(self.lock_file_path)
    if self.fd is not None:
        os.close(self.fd)
        self.fd = None


def _make_locked(path: str) -> int | None:
    """A descriptor holding the flock of a new marked lock file at `path`; None if a lock
    file is there."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    try:
        os.write(fd, MARK)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.link(tmp, path)
    except FileExistsError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return fd


def is_ours(path) -> bool:
    """Whether the lock file at `path` was made by our FileBaton (it carries the mark)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MARK)) == MARK
    except OSError:
        return False


def remove_if_dead(path) -> bool | None:
    """Remove the lock file at `path` if it is ours and its holder is gone: True when
    removed here, None when it went or was replaced meanwhile (the place may be free),
    False when it stays (its holder lives, or it is not ours: no flock tells)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if os.read(fd, len(MARK)) != MARK:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                return None
            os.unlink(path)  # no one else can: a new file needs this one gone first
            return True
        except FileNotFoundError:
            return None
    finally:
        os.close(fd)
