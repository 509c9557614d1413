"""Spare children: started ahead, per environment, so that a task does not wait for
Python and torch to start (seconds). Each spare still runs exactly one task."""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

from kb_eval.isolation import procs, sandbox
from kb_eval.isolation.handle import Child


class Spares:
    """Up to `depth` waiting children per environment, oldest first; each runs one task.
    A spare has `depth` tasks' time to import torch before it is needed."""

    def __init__(self):
        self.lock = threading.Lock()
        # per task environment: (child, the whole environment it started with)
        self.waiting: dict[str, list[tuple[Child, str]]] = {}
        self.scratch = procs.ScratchDir("spares")

    def _key(self, env: dict | None, module: str) -> str:
        return json.dumps([env or {}, module], sort_keys=True)

    @staticmethod
    def _inherited(env: dict | None) -> str:
        """What a spare took from this process when it started: the environment and, in
        a sandbox, the folders it bound (sandbox.roots_identity)."""
        return json.dumps([dict(os.environ), sandbox.roots_identity(env)], sort_keys=True)

    def take(self, env: dict | None, module: str) -> Child | None:
        """The oldest spare for this environment, or None (none ready, or it died). A spare
        started before this process's environment changed is ended rather than used."""
        now, stale, child = self._inherited(env), [], None
        with self.lock:
            queue = self.waiting.get(self._key(env, module), [])
            while queue:
                spare, inherited = queue.pop(0)
                if inherited == now:
                    child = spare
                    break
                stale.append(spare)
        for spare in stale:
            spare.kill_all()
        if child is not None and child.proc.poll() is not None:
            child.kill_all()
            return None
        return child

    def refill(self, env: dict | None, module: str, depth: int) -> None:
        """Start spares until `depth` wait for this environment."""
        key, inherited = self._key(env, module), self._inherited(env)
        with self.lock:
            queue = self.waiting.setdefault(key, [])
            self.scratch.path.mkdir(parents=True, exist_ok=True)
            while len(queue) < depth:
                log = self.scratch.path / f"spare_{time.monotonic_ns()}.log"
                queue.append((Child.start(env, log, module), inherited))

    def close(self) -> None:
        """Kill every waiting spare and remove their scratch logs (at exit)."""
        with self.lock:
            children = [c for queue in self.waiting.values() for c, _ in queue]
            self.waiting = {}
        for child in children:
            child.kill_all()
        self.scratch.remove()


SPARES = Spares()
atexit.register(SPARES.close)
