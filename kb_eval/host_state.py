"""How fast the host's CPU runs just now, and a baseline's repeated timing of a
host-paced problem until the host has run it at full pace.

A reference launching thousands of kernels a call runs at the host's pace, which on
cloud machines moves by itself (docs/PERFORMANCE.md). A baseline file is compared across
runs, so it retimes such a problem at full pace until two timings agree. The eval needs
none of this: both sides are timed in interleaved rounds.
"""

from __future__ import annotations

import statistics
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

_BLOB = bytes(range(256)) * 16384  # 4 MiB

HOST_PACED = 0.9  # launch share from which a time is the host's (TimingStats.launch_share)
# Launch share from which a call turns host-paced when the host runs at half its pace:
# a baseline retimes such a call until the host has shown its full pace.
PACE_SENSITIVE = 0.5
# A probe within this factor of the fastest one seen on the core: full pace.
FULL_PACE = 1.15
# Two full-pace timings whose medians are this close: the host has shown its full pace.
AGREE = 0.02
POLL_S = 0.2  # between probes while waiting for the host

T = TypeVar("T")


def work_ms(repeats: int = 3) -> float:
    """Median time (ms) of a Python loop and a CRC over 4 MiB: interpreter and memory
    work, no system calls, no GPU. Only comparable with itself on one machine."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sum(i * i for i in range(100_000))
        zlib.crc32(_BLOB)
        times.append(1e3 * (time.perf_counter() - start))
    return round(statistics.median(times), 4)


def launch_pace_ms(device, launches: int = 2000, repeats: int = 3) -> float:
    """Median host time (ms) to launch `launches` one-float kernels on a CUDA device: the
    pace a launch-bound call goes at. `work_ms` on a CPU."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return work_ms(repeats)
    one = torch.zeros(1, device=device)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(launches):
            one.add_(1.0)
        times.append(1e3 * (time.perf_counter() - start))
    torch.cuda.synchronize(device)
    return round(statistics.median(times), 4)


@dataclass
class Paced(Generic[T]):
    """The kept timing and the host's pace around it."""
    result: T
    pace_ms: list[float]  # the probe before and after the kept timing
    tries: int = 1  # timings made, the kept one among them
    best_ms: float = 0.0  # the fastest probe known on this core, this child's included
    # True: two full-pace timings agreed; False: not within the wait; None: the launch
    # share was under PACE_SENSITIVE
    full_pace: bool | None = None


def timed_at_full_pace(time_once: Callable[[], T], median: Callable[[T], float],
                       launch_share: Callable[[T], float | None], best_ms: float | None,
                       wait_s: float, probe: Callable[[], float] = work_ms) -> Paced[T]:
    """`time_once()`, probed before and after. If its launch share is at least
    PACE_SENSITIVE, time it again, each time once the probe is within FULL_PACE of the
    fastest known (`best_ms` or this child's), until two full-pace timings agree within
    AGREE or `wait_s` has passed; keep the fastest full-pace timing (else the fastest).
    The first timing never waits."""
    deadline = time.monotonic() + wait_s
    best = best_ms
    tries: list[Paced[T]] = []
    while True:
        before = probe()
        best = min(best or before, before)
        if tries and before > FULL_PACE * best:  # the host is slow: wait, probe again
            if time.monotonic() + POLL_S > deadline:
                break
            time.sleep(POLL_S)
            continue
        result = time_once()
        after = probe()
        best = min(best, after)
        tries.append(Paced(result, [before, after]))
        if ((launch_share(result) or 0) < PACE_SENSITIVE or _shown(tries, median, best)
                or time.monotonic() >= deadline):
            break
    kept = min(_at_full_pace(tries, best) or tries, key=lambda t: median(t.result))
    kept.tries, kept.best_ms = len(tries), best
    if (launch_share(kept.result) or 0) >= PACE_SENSITIVE:
        kept.full_pace = _shown(tries, median, best)
    return kept


def _at_full_pace(tries: list[Paced], best: float) -> list[Paced]:
    """The timings with both probes within FULL_PACE of the best."""
    return [t for t in tries if max(t.pace_ms) <= FULL_PACE * best]


def _shown(tries: list[Paced], median: Callable, best: float) -> bool:
    """The fastest two full-pace timings agree within AGREE."""
    fast = sorted(median(t.result) for t in _at_full_pace(tries, best))
    return len(fast) >= 2 and fast[1] <= (1 + AGREE) * fast[0]
