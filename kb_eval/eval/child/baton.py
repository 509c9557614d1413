"""torch's build lock (cpp_extension's FileBaton), made to outlive no holder: a killed
holder would leave `<build dir>/lock` for good and time out every later load.

Our lock file is born locked (written aside with a host mark, flock'ed, hard-linked into
place); the kernel drops a flock with its holder, so a marked lock whose flock can be taken
is a dead holder's and is removed. Other lock files are waited on as torch does.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
import time
from pathlib import Path

from kb_eval.isolation.sandbox import leader_pid

MARK = f"kb-eval baton on {socket.gethostname()}: flock'ed by its holder\n".encode()
_TRIES = 10  # lock files replaced under us this often in a row: wait as torch does


class _NoFlockHere(OSError):
    """The file system cannot link or flock: torch's baton instead."""


def use_build_dirs(ext: str | None) -> None:
    """Point load_inline, Triton and inductor at this source's build cache folder, so a
    later run of the same source (a warm pass, a retry) loads what an earlier compiled."""
    if ext:
        install()  # a killed child's build lock must not stall the next load
        os.environ["TORCH_EXTENSIONS_DIR"] = ext
        os.environ["TRITON_CACHE_DIR"] = str(Path(ext) / "triton")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(ext) / "inductor")


def install() -> None:
    """Make torch's FileBaton ours in this process (idempotent)."""
    from torch.utils.file_baton import FileBaton

    if FileBaton.try_acquire is not try_acquire:
        FileBaton.kb_torch_acquire = FileBaton.try_acquire
        FileBaton.try_acquire, FileBaton.wait, FileBaton.release = try_acquire, wait, release


def try_acquire(self) -> bool:
    for _ in range(_TRIES):
        try:
            fd = _make_locked(self.lock_file_path)
        except _NoFlockHere:
            return self.kb_torch_acquire()
        if fd is not None:
            self.fd = fd
            return True
        if remove_if_dead(self.lock_file_path) is False:
            return False  # a live holder, or a lock not ours
    return False


def wait(self) -> None:
    # a dead holder's half-made build fails its import (ours, built again)
    while os.path.exists(self.lock_file_path):
        time.sleep(self.wait_seconds)
        remove_if_dead(self.lock_file_path)


def release(self) -> None:
    # removed before the flock goes, and only our own file
    if self.fd is None:
        os.remove(self.lock_file_path)
        return
    try:
        if os.stat(self.lock_file_path).st_ino == os.fstat(self.fd).st_ino:
            os.remove(self.lock_file_path)
    except FileNotFoundError:
        pass
    finally:
        os.close(self.fd)
        self.fd = None


def _make_locked(path: str) -> int | None:
    """A descriptor holding the flock of a new marked lock file at `path`; None if a lock
    file is there."""
    tmp = f"{path}.{leader_pid()}.{threading.get_ident()}"  # pid 1 in every sandbox
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
    try:
        os.write(fd, MARK)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.link(tmp, path)
    except FileExistsError:
        os.close(fd)
        return None
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOLCK,
                       errno.EBADF, errno.EMLINK, errno.ENOSYS):
            raise _NoFlockHere(str(e)) from e
        raise
    except BaseException:
        os.close(fd)
        raise
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return fd


def _open(path) -> int:
    """The lock file opened for its flock (read-write: NFS's flock needs it)."""
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def remove_if_dead(path) -> bool | None:
    """Remove our lock file at `path` if its holder is gone: True removed, None gone or
    replaced meanwhile, False it stays."""
    return sweep(path, foreign=lambda made: False)


def sweep(path, foreign) -> bool | None:
    """`remove_if_dead`, and a foreign lock file removed when `foreign(mtime)` says so."""
    try:
        fd = _open(path)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        if os.read(fd, len(MARK)) == MARK:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # its holder lives (or this file system cannot tell)
        elif not foreign(os.fstat(fd).st_mtime):
            return False
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            return None
        # no one else removes it now: its other removers hold the flock
        os.unlink(path)
        return True
    except FileNotFoundError:
        return None
    except OSError:
        return False
    finally:
        os.close(fd)
