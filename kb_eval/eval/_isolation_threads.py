"""Stop-gap until kb_eval.isolation is thread-safe (asked of its owner).

The pool calls `run_isolated` from several threads at once (builds, devices). After each
child, isolation's `_reap_orphans` kills every direct child of this process that carries
the sandbox marker and is not a waiting spare, which includes the *running* children of
other threads. This module records live children and makes `_reap_orphans` spare them.
It does nothing once isolation declares `THREAD_SAFE = True`.
"""

from __future__ import annotations

import threading

import kb_eval.isolation as iso

_live: set[int] = set()
_lock = threading.Lock()


def install() -> None:
    if getattr(iso, "THREAD_SAFE", False) or getattr(iso, "_kb_eval_threads_patched", False):
        return
    start, kill_all, is_spare = iso._Child.start.__func__, iso._Child.kill_all, iso._is_spare

    def tracked_start(cls, env, log_path):
        child = start(cls, env, log_path)
        with _lock:
            _live.add(child.proc.pid)
        return child

    def tracked_kill_all(self):
        with _lock:
            _live.discard(self.proc.pid)
        kill_all(self)

    def protected(pid: int) -> bool:
        with _lock:
            if pid in _live:
                return True
        return is_spare(pid)

    iso._Child.start = classmethod(tracked_start)
    iso._Child.kill_all = tracked_kill_all
    iso._is_spare = protected
    iso._kb_eval_threads_patched = True
