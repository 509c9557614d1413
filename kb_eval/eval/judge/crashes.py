"""What ended a child that returned no result, named for a record."""

from __future__ import annotations

from kb_eval.isolation import ChildOutcome
from kb_eval.results import CrashInfo

_SIGNAL_KINDS = {"SIGSEGV": "segfault", "SIGABRT": "abort", "SIGBUS": "bus_error",
                 "SIGFPE": "fpe", "SIGILL": "illegal_instruction", "SIGKILL": "killed",
                 "SIGALRM": "timeout"}


def crash_info(phase: str, out: ChildOutcome) -> CrashInfo:
    """Name what ended a child that returned no result."""
    if out.status in ("timeout", "oom", "output_flood"):
        kind = out.status
    elif out.status == "crashed" and out.signal_name:
        kind = _SIGNAL_KINDS.get(out.signal_name, out.signal_name.lower())
    elif out.status in ("crashed", "no_result"):
        kind = "exit"  # the process ended itself (os._exit, sys.exit in a thread, ...)
    else:
        kind = "error"  # an exception escaped the task (SystemExit, KeyboardInterrupt)
    return CrashInfo(phase=phase, kind=kind, exit_code=out.exit_code, signal=out.signal_name,
                     output_tail=out.output_tail[-4000:])


def status_of(crash: CrashInfo) -> str:
    """A sample's status for a child that died: timeout / oom / output_flood / crashed."""
    return crash.kind if crash.kind in ("timeout", "oom", "output_flood") else "crashed"
