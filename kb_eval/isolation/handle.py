"""The parent's handle on one child process: start it, send it a task, watch it from
outside (wall time, group memory, output size) and kill it. One-shot children, spares
and servers differ only in how many tasks they are sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from kb_eval.isolation import sandbox
from kb_eval.isolation.forkserver import FORK_SERVERS
from kb_eval.isolation.procs import (ADOPTING, CHECK_S, LIVE, MARKER, OWNER, RSS, STOPPING,
                                     Stopped,
                                     become_subreaper, owner_tag,
                                     file_size, killpg, reap_orphans)

POLL_S = 0.005  # how often a watcher looks whether its child is done (GPU lane: latency)
BUILD_POLL_S = 0.05  # builds take tens of seconds: their watchers wake less often


def preload_spec(target: str, warm_cuda: bool) -> str:
    """The child's preload ("module[:cuda]") for a task `target` ("module:function")."""
    return target.partition(":")[0] + (":cuda" if warm_cuda else "")


class Child:
    """One child process as the parent sees it; in LIVE from its start until kill_all."""

    def __init__(self, proc, log_file):  # a Popen, or a forkserver.ForkedProc
        self.proc = proc
        self.log_file = log_file
        self.log_path = Path(log_file.name)
        self.owner = ""  # name of the thread that sent the task
        self.log_base = 0  # log size when the current task was sent
        self.overran: str | None = None  # the time budget it was killed for
        self.sandboxed = False  # its exit status comes from the sandbox's init
        LIVE.add(self)

    @classmethod
    def start(cls, env: dict | None, log_path: Path, preload: str = "") -> "Child":
        """Start a child that imports torch and `preload` ("module[:cuda][+serve]"), then
        waits for its task. Forked from the environment's zygote when it can; a Server's
        child always starts afresh."""
        become_subreaper()
        if STOPPING.is_set():
            raise Stopped("the run is stopping")
        log_file = open(log_path, "wb")
        inherited = dict(os.environ)
        if sandbox.POLICY_VAR in (env or {}):  # nothing of the user's reaches candidate code
            inherited = sandbox.clean_env(inherited)
        full_env = {**inherited, **(env or {}), MARKER: "1", OWNER: owner_tag(),
                    "PYTHONUNBUFFERED": "1"}
        child = None
        if "+serve" not in preload:
            child = FORK_SERVERS.spawn(full_env, preload, log_file, lambda p: cls(p, log_file))
        if child is None:
            with ADOPTING:  # until the child is in LIVE, no reaper takes it for an orphan
                proc = subprocess.Popen([sys.executable, "-m", "kb_eval.isolation", preload],
                                        stdin=subprocess.PIPE, stdout=log_file,
                                        stderr=subprocess.STDOUT, env=full_env,
                                        start_new_session=True, close_fds=True)
                child = cls(proc, log_file)
        child.sandboxed = sandbox.POLICY_VAR in full_env
        return child

    def adopt_log(self, log_path: Path) -> None:
        """A spare was started with a scratch log; point the task's log name at it."""
        try:
            if log_path.exists() or log_path.is_symlink():
                log_path.unlink()
            os.link(self.log_path, log_path)
        except OSError:
            return  # another file system: keep reading the scratch log
        self.log_path.unlink(missing_ok=True)
        self.log_path = log_path

    def send(self, task: dict, last: bool = True) -> None:
        """One task line; `last` closes stdin (a one-shot child), else more may follow."""
        self.owner = threading.current_thread().name
        self.log_base = 0 if last else file_size(self.log_path)
        try:
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
            if last:
                self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child already died; watch() reports it

    def watch(self, timeout_s: float, mem_limit_mb: int | None, output_limit: int,
              done: Path | None = None, poll_s: float = POLL_S,
              budget: Callable[[], str | None] | None = None) -> str | None:
        """Wait for exit (or, for a server, for the task's result file `done`); return why
        we killed it (None if it ended by itself). `budget`, asked every CHECK_S, names a
        time budget the child overran (a "timeout", kept in `self.overran`)."""
        deadline = time.monotonic() + timeout_s
        # The first look at memory and output (a /proc scan, ms) one CHECK_S in.
        next_check = time.monotonic() + CHECK_S
        while self.proc.poll() is None and not (done is not None and done.exists()):
            now = time.monotonic()
            if now > deadline:
                return "timeout"
            if now >= next_check:
                next_check = now + CHECK_S
                if self._flooded(output_limit):
                    return "output_flood"
                if mem_limit_mb and RSS.group_mb(self.proc.pid) > mem_limit_mb:
                    return "oom"
                if budget is not None and (overran := budget()):
                    self.overran = overran
                    return "timeout"
            time.sleep(poll_s)
        # A flood written faster than we poll is over the limit all the same.
        return "output_flood" if self._flooded(output_limit) else None

    def _flooded(self, output_limit: int) -> bool:
        return file_size(self.log_path) - self.log_base > output_limit

    def kill_all(self) -> None:
        """End the child's whole process group, then any orphans it left."""
        killpg(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.log_file.close()
        LIVE.discard(self)
        reap_orphans()

    def log_tail(self, max_bytes: int = 8192, max_lines: int = 60) -> str:
        """The end of the current task's output, for the record of what went wrong."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self.log_base, file_size(self.log_path) - max_bytes))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-max_lines:])
