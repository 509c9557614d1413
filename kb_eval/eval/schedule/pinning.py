"""One CPU core for both sides of a paired timing, on a GPU.

A launch-bound model's time is the host's pace, which differed by up to a third between
cores. The pairing pins the main threads of the candidate's child and the reference
server to one core for the timing step, asserted before every round (candidate code can
call sched_setaffinity); the server gets its mask back afterwards.
"""

from __future__ import annotations

import os

from kb_eval.isolation.child import CORES_VAR

SWITCH_VAR = "KB_EVAL_PIN_CORE"  # "0": leave the scheduler alone (a measurement's A/B)


def enabled() -> bool:
    return os.environ.get(SWITCH_VAR, "1") != "0"


def core_for(device: str) -> int | None:
    """The core `device`'s timed calls launch from; None on a CPU (the timed work is the
    calls themselves, on every core) or when switched off."""
    if device.startswith("cpu") or not enabled():
        return None
    return timing_core(device)


def timing_core(device: str) -> int | None:
    """The core for `device`'s timing steps: counted from the last core this process may
    use (the first cores take interrupts and the parent's own work more often), one per
    GPU so that lanes never share one. None with fewer than two cores."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    index = int(device) if device.isdigit() else 0
    return cores[-1 - index % (len(cores) - 1)]


def untimed_cores(devices: list[str]) -> set[int] | None:
    """The cores for everything but a timing step, so nothing preempts a timing thread.
    None on a CPU run, with pinning off, or where too few cores would be left."""
    timing = {core_for(d) for d in devices} - {None}
    cores = set(os.sched_getaffinity(0))
    if not timing or len(cores - timing) < 1:
        return None
    return cores - timing


def untimed_env(devices: list[str]) -> dict[str, str]:
    """The environment variable that starts a child on the untimed cores ({} when none)."""
    cores = untimed_cores(devices)
    return {CORES_VAR: ",".join(map(str, sorted(cores)))} if cores else {}


def pin(pid: int, core: int) -> set[int] | None:
    """Pin `pid`'s main thread to `core`; its mask before, or None if it cannot be had
    (the process is gone)."""
    try:
        before = os.sched_getaffinity(pid)
        if before != {core}:
            os.sched_setaffinity(pid, {core})
        return before
    except OSError:
        return None


def restore(pid: int, mask: set[int]) -> None:
    try:
        os.sched_setaffinity(pid, mask)
    except OSError:
        pass  # the process is gone
