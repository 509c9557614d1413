"""What a sandboxed child tried that the sandbox refuses, named for its record.

The sandbox refuses; this only tells: an audit hook in the child writes one line per
forbidden attempt to `refused.jsonl`, read by the parent after the child ended. Native
code bypassing Python's audit may go untold: a report, not the defence.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

FILE = "refused.jsonl"
MAX_LINES = 50
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROC_SECRETS = re.compile(r"^/proc/(\d+)/(environ|mem|maps|cmdline|auxv)$")
# Native entry points a candidate would look up to do what the sandbox forbids.
_NATIVE = {"kill", "killpg", "tgkill", "ptrace", "process_vm_readv", "process_vm_writev",
           "connect", "setrlimit", "prlimit", "prlimit64", "mount", "umount2", "unshare",
           "setns", "pivot_root"}


class Teller:
    """The audit hook of one task: `writable` are the roots it may write under."""

    def __init__(self, workdir: Path, writable: list[str]):
        self.roots = [os.path.realpath(p) for p in [str(workdir), *writable]]
        self.fd = os.open(Path(workdir) / FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                          | os.O_CLOEXEC, 0o600)
        self.told = 0
        self.busy = False

    def __call__(self, event: str, args: tuple) -> None:
        if self.busy or self.told >= MAX_LINES:
            return
        self.busy = True
        try:
            what = self.judge(event, args)
            if what:
                self.told += 1
                os.write(self.fd, (json.dumps(what) + "\n").encode())
        except Exception:  # noqa: BLE001 - telling must never break the task
            pass
        finally:
            self.busy = False

    def judge(self, event: str, args: tuple) -> str | None:
        if event == "open":
            return self._open(*args[:3])
        if event in ("os.kill", "os.killpg"):
            target, _sig = args[:2]
            if event == "os.killpg" or target <= 0 or target == os.getppid():
                return f"signal {_sig} to {'group ' if event == 'os.killpg' else ''}{target}"
        if event == "socket.connect":
            return f"connect to {args[1]!r}"
        if event == "ctypes.dlsym" and isinstance(args[1], str) and args[1] in _NATIVE:
            return f"native {args[1]}()"
        if event == "resource.setrlimit":
            return f"raise limit {args[0]} to {args[1]}"
        return None

    def _open(self, path, mode, flags) -> str | None:
        if not isinstance(path, (str, bytes)):
            return None
        path = os.fsdecode(path)
        real = os.path.realpath(path)
        secret = _PROC_SECRETS.match(real)
        if secret and int(secret.group(1)) != os.getpid():
            return f"read {real}"
        writes = (isinstance(flags, int) and flags & _WRITE_FLAGS) or \
            (isinstance(mode, str) and any(c in mode for c in "wax+"))
        if writes and not real.startswith("/dev/") and \
                not any(real == r or real.startswith(r + "/") for r in self.roots):
            return f"write {real}"
        return None


def install(workdir: Path, writable: list[str]) -> None:
    """Tell, for the rest of this process's life, what it tries that the sandbox refuses."""
    sys.addaudithook(Teller(workdir, writable))


def read(workdir: Path) -> list[str]:
    """What a task's child tried that was refused (the parent's side), in order, once each."""
    try:
        lines = (Path(workdir) / FILE).read_text(errors="replace").splitlines()
    except OSError:
        return []
    told = []
    for line in lines[:MAX_LINES]:
        try:
            what = json.loads(line)
        except ValueError:
            continue
        if isinstance(what, str) and what not in told:
            told.append(what[:300])
    return told
