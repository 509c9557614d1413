"""What became of a task, read only after the child ended (or a server's result file
appeared), so that a crash cannot leave half a message behind."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kb_eval.isolation.sandbox import SIGNALLED

if TYPE_CHECKING:
    from kb_eval.isolation.handle import Child


@dataclass
class ChildOutcome:
    """What a one-shot child or a server call came to; the caller names the failure."""

    status: str  # ok | error | crashed | timeout | oom | output_flood | no_result
    exit_code: int | None = None
    signal_name: str | None = None
    result: dict | None = None
    error: str | None = None  # exception type and message when status == "error"
    output_tail: str = ""
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "crashed":
            return f"crashed ({self.signal_name or f'exit {self.exit_code}'})"
        return self.error or self.status


def outcome(status: str | None, child: Child, result_path: Path, wall: float) -> ChildOutcome:
    """The outcome from why we killed the child (`status`), its exit status and its result
    file: no file and an abnormal exit is a crash, no file and a clean exit no_result."""
    code = child.proc.returncode
    if child.sandboxed and code is not None and code > SIGNALLED:
        code = SIGNALLED - code  # the sandbox's init told a death by signal
    sig = signal.Signals(-code).name if code is not None and code < 0 else None
    out = ChildOutcome(status=status or "ok", exit_code=code, signal_name=sig,
                       output_tail=child.log_tail(), wall_s=wall)
    if status:  # killed by us: timeout / oom / output_flood
        return out
    message = read_result(result_path)
    if message is None:
        out.status = "crashed" if (sig or code) else "no_result"
    elif message.get("ok"):
        out.result = message.get("result") or {}
    else:
        out.status = "error"
        out.error = message.get("error", "unknown error")
        out.output_tail = (out.output_tail + "\n" + message.get("traceback", "")).strip()
    return out


def read_result(path: Path) -> dict | None:
    """The child's message, or None when it is missing or not a JSON object."""
    try:
        message = json.loads(path.read_text())
        return message if isinstance(message, dict) else None
    except (OSError, ValueError):
        return None
