"""The parent's calls to a reference server: their order, and their seconds per sample."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from kb_eval.isolation import ChildOutcome

# server seconds of this (lane's) thread's calls, queueing not included
_SERVER_TIME = threading.local()
CALL_KINDS = ("plan", "estimate", "export", "exchange_free", "compare")


def take_server_seconds() -> dict[str, float]:
    """The servers' seconds for this thread's calls since the last take: "server",
    "server_<kind>" per CALL_KINDS and the parts the server timed itself."""
    spent, _SERVER_TIME.spent = getattr(_SERVER_TIME, "spent", {}), {}
    return {k: round(v, 3) for k, v in spent.items()}


def note_server_time(payload: dict, seconds: float, out: ChildOutcome | None) -> None:
    """Add one call's seconds (and the parts its answer timed) to this thread's count."""
    kind = next((k for k in CALL_KINDS if payload.get(k)), "other")
    parts = (out.result or {}).get("spent") if out is not None and out.ok else None
    spent = getattr(_SERVER_TIME, "spent", {})
    for part, s in [("server", seconds), (f"server_{kind}", seconds),
                    *((f"server_{k}", v) for k, v in (parts or {}).items()
                      if isinstance(v, (int, float)))]:
        spent[part] = spent.get(part, 0.0) + s
    _SERVER_TIME.spent = spent


def out_of_memory(out: ChildOutcome) -> bool:
    """A task out of device memory leaves the server sound: it keeps running."""
    return "OutOfMemoryError" in (out.error or "")


class ServerTurns:
    """One call at a time on a device's server, calls that start or time a sample before
    those that end one, so the next samples are ready before the shared turn closes."""

    FIRST = ("plan", "estimate", "export", "time_calls")

    def __init__(self):
        self.cond = threading.Condition()
        self.busy = False
        self.first_waiting = 0

    @contextlib.contextmanager
    def held(self, payload: dict) -> Iterator[None]:
        first = any(payload.get(k) for k in self.FIRST)
        with self.cond:
            self.first_waiting += first
            self.cond.wait_for(lambda: not self.busy and (first or not self.first_waiting))
            self.first_waiting -= first
            self.busy = True
        try:
            yield
        finally:
            with self.cond:
                self.busy = False
                self.cond.notify_all()
