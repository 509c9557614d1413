"""How fast the host's CPU runs just now: one fixed piece of pure host work, timed.

A reference that launches thousands of kernels a call runs at the host's pace, not the
GPU's. On the cloud machines the GPUs come in, that pace moves by itself: on the H200
machine (session 18, `benchmarks/launch_pace.py --trace`) this work took 5.3 ms for
stretches and 10.3 ms for others, seconds to minutes long, in one pinned process, and
KernelBench level1/71's call time followed it (10.4 vs 15.5 ms, correlation +0.88). A
baseline records the figure before and after each problem's calls, so that when two
files differ on such a problem the host's speed is on record next to the GPU's state
(kb_eval/gpu_state.py).
"""

from __future__ import annotations

import statistics
import time
import zlib

_BLOB = bytes(range(256)) * 16384  # 4 MiB


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
