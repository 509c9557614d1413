"""Cheap children: one zygote per environment (zygote.py) forks each fresh child, so a
child costs a fork, not a Python + torch start (docs/PERFORMANCE.md). Each child runs one
task in its own session, re-parented to us (a child subreaper), watched like a Popen one.
Whenever the fork server cannot serve (KB_EVAL_FORK_SERVER=0, not Linux, the zygote
refused or died), `spawn` returns None and the caller starts the child the slow way: a
fork server can make a run faster, never different.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, TypeVar

from kb_eval.isolation import procs

T = TypeVar("T")
ENABLE_VAR = "KB_EVAL_FORK_SERVER"
READY_TIMEOUT_S = 120.0  # a zygote imports torch (and, at a first request, a module)
PID_TIMEOUT_S = 30.0
MAX_STARTS = 3  # zygotes per environment: one that keeps breaking is not worth restarting
# Zygotes alive at once (each holds torch: 0.22 GB resident with the CPU build here): a
# build environment and one per GPU of an 8-GPU host fit; a process that meets more
# environments (tests) ends the least recently used.
MAX_ZYGOTES = 12


class ForkedProc:
    """What a Child needs of a Popen, for a child forked by a zygote and re-parented to
    this process: `pid`, `stdin` (the task channel), `poll`, `wait`, `returncode`."""

    def __init__(self, pid: int, channel: socket.socket):
        self.pid, self.returncode = pid, None
        self.stdin = channel.makefile("wb")
        channel.close()  # the file holds the socket now: closing it ends the child's input
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: it is gone all the same
                    self.returncode = -signal.SIGKILL
                    return self.returncode
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    with contextlib.suppress(OSError):
                        self.stdin.close()
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.002)
        return self.returncode


class ForkServer:
    """One zygote for one environment; `spawn` forks a child from it."""

    def __init__(self, env: dict, log_dir: Path):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"zygote_{time.monotonic_ns()}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kb_eval.isolation.zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        procs.LIVE.keep(self.proc.pid)  # a direct child the reapers must leave alone
        self.control = ours
        self.error: str | None = None
        self.refused = False  # the zygote itself said forking is unsafe: do not retry
        try:
            hello = self._hello()
            if not hello.get("ready"):
                self.refused = True
                self._broken(hello.get("error") or "not ready")
        except (OSError, ValueError) as e:
            self._broken(f"{type(e).__name__}: {e}")

    def spawn(self, spec: str, log_file) -> ForkedProc | None:
        """A new child for `spec` ("module[:cuda]") writing to `log_file`, or None (this
        server is broken). Called with procs.ADOPTING held until the child is in LIVE."""
        if self.error is not None:
            return None
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.control, [json.dumps({"spec": spec}).encode()],
                            [theirs.fileno(), log_file.fileno()])
            theirs.close()
            reply = self._reply()
            if not reply.get("ok"):
                self.refused = True
                raise OSError(reply.get("error") or "no child")
            ours.settimeout(PID_TIMEOUT_S)
            with ours.makefile("rb") as reader:
                line = reader.readline()
            if not line.endswith(b"\n"):
                raise OSError("the child ended before it said its pid")
            ours.settimeout(None)
            return ForkedProc(int(line), ours)
        except (OSError, ValueError) as e:
            theirs.close()
            ours.close()
            self._broken(f"{type(e).__name__}: {e}")
            return None

    def _hello(self) -> dict:
        """The zygote's first message, once it has imported torch: waited for in short
        slices, so that a stop (procs.STOPPING) does not wait for a slow start."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        self.control.settimeout(0.2)
        while True:
            try:
                hello = self._reply()
                break
            except socket.timeout:
                if procs.STOPPING.is_set() or time.monotonic() > deadline:
                    raise OSError("the zygote did not start in time (or the run stops)")
        self.control.settimeout(READY_TIMEOUT_S)
        return hello

    def _reply(self) -> dict:
        message = self.control.recv(65536)
        if not message:
            raise OSError("the zygote closed its end")
        return json.loads(message)

    def _broken(self, why: str) -> None:
        self.error = why
        self.close()

    def close(self) -> None:
        self.control.close()
        procs.killpg(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        procs.LIVE.unkeep(self.proc.pid)


class ForkServers:
    """The zygotes of this process, one per environment, started at first use."""

    def __init__(self):
        self.lock = threading.Lock()
        self.servers: OrderedDict[str, ForkServer] = OrderedDict()  # least recently used first
        self.starts: dict[str, int] = {}
        self.told: set[str] = set()
        self.scratch = procs.ScratchDir("zygotes")

    def enabled(self) -> bool:
        return (os.environ.get(ENABLE_VAR, "1") != "0" and sys.platform.startswith("linux")
                and procs.become_subreaper())

    def server(self, env: dict) -> ForkServer | None:
        """The zygote for `env` (started now at its first use, or again after it broke, a
        few times at most), or None: start the child the slow way."""
        if not self.enabled() or procs.STOPPING.is_set():
            return None
        key = json.dumps(env, sort_keys=True)
        with self.lock:
            server = self.servers.get(key)
            if server is not None:
                self.servers.move_to_end(key)
            if server is None or (server.error and not server.refused
                                  and self.starts.get(key, 0) < MAX_STARTS):
                self._make_room()
                self.starts[key] = self.starts.get(key, 0) + 1
                try:
                    server = self.servers[key] = ForkServer(env, self.scratch.path)
                except OSError:  # no zygote could be started (e.g. out of memory)
                    return None
            if server.error and key not in self.told and not procs.STOPPING.is_set():
                self.told.add(key)  # once per environment: the run is slower, not wrong
                print(f"kb_eval: children start afresh, not forked ({server.error})",
                      file=sys.stderr)
        return None if server.error else server

    def _make_room(self) -> None:
        while len(self.servers) >= MAX_ZYGOTES:
            oldest, server = self.servers.popitem(last=False)
            self.starts.pop(oldest, None)
            if server.error is None:
                server.close()

    def spawn(self, env: dict, spec: str, log_file, adopt: Callable[[ForkedProc], T]) -> T | None:
        """A child forked for `spec`, handed to `adopt` (which puts it in LIVE) while no
        reaper looks for orphans; None: start it the slow way."""
        for _ in range(2):  # a zygote found dead at this request is replaced once
            server = self.server(env)
            if server is None:
                return None
            with procs.ADOPTING:
                proc = server.spawn(spec, log_file)
                if proc is not None:
                    return adopt(proc)
        return None

    def close(self) -> None:
        with self.lock:
            servers, self.servers = list(self.servers.values()), OrderedDict()
        for server in servers:
            if server.error is None:
                server.close()
        self.scratch.remove()


FORK_SERVERS = ForkServers()
atexit.register(FORK_SERVERS.close)
