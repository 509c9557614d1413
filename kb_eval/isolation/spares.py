"""Spare children: started ahead, per environment, so that a task does not wait for
Python and torch to start (seconds). Each spare still runs exactly one task."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import threading
import time
from pathlib import Path

from kb_eval.isolation.handle import Child


class Spares:
    """Up to `depth` waiting children per environment, oldest first; each runs one task.
    A spare has `depth` tasks' time to import torch before it is needed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.waiting: dict[str, list[Child]] = {}
        self.dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"kb_eval_spares_{os.getpid()}"

    def _key(self, env: dict | None, module: str) -> str:
        return json.dumps([env or {}, module], sort_keys=True)

    def take(self, env: dict | None, module: str) -> Child | None:
        """The oldest spare for this environment, or None (none ready, or it died)."""
        with self.lock:
            queue = self.waiting.get(self._key(env, module), [])
            child = queue.pop(0) if queue else None
        if child is not None and child.proc.poll() is not None:
            child.kill_all()
            return None
        return child

    def refill(self, env: dict | None, module: str, depth: int) -> None:
        """Start spares until `depth` wait for this environment."""
        key = self._key(env, module)
        with self.lock:
            queue = self.waiting.setdefault(key, [])
            self.dir.mkdir(parents=True, exist_ok=True)
            while len(queue) < depth:
                log = self.dir / f"spare_{time.monotonic_ns()}.log"
                queue.append(Child.start(env, log, module))

    def close(self) -> None:
        """Kill every waiting spare and remove their scratch logs (at exit)."""
        with self.lock:
            children = [c for queue in self.waiting.values() for c in queue]
            self.waiting = {}
        for child in children:
            child.kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)


SPARES = Spares()
atexit.register(SPARES.close)
