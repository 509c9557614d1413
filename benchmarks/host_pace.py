"""Is a slow host one core or the whole machine? (issue 14: host-paced drift.)

On the H200 machine one pinned process's fixed host work (kb_eval/host_state.py) took
5.3 ms, then ~10 ms for stretches of seconds, and a launch-bound reference's calls
followed it (docs/GUARANTEES.md, baseline drift). This runs that work on several cores at
once, one process per core, every 50 ms for S seconds, and prints each core's median per
2-second window: when all cores slow down together the whole VM was slowed (its host),
when one core alone, that core (a busy neighbour on its physical core). No GPU needed:

    python benchmarks/host_pace.py --seconds 60 --cores 0-15
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

from kb_eval.host_state import work_ms

WINDOW_S = 2.0
EVERY_S = 0.05


def _probe(core: int, seconds: float, start_at: float, out) -> None:
    os.sched_setaffinity(0, {core})
    while time.time() < start_at:
        time.sleep(0.01)
    rows = []
    while time.time() - start_at < seconds:
        rows.append((time.time() - start_at, work_ms(1)))
        time.sleep(EVERY_S)
    out.put((core, rows))


def _cores(text: str) -> list[int]:
    cores: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cores += range(int(lo), int(hi or lo) + 1)
    return cores


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60, help="how long (default: 60)")
    p.add_argument("--cores", type=_cores, default=None,
                   help="cores to watch, e.g. 0-15 or 3,15 (default: all this process may use)")
    args = p.parse_args()
    cores = args.cores or sorted(os.sched_getaffinity(0))
    out: mp.Queue = mp.Queue()
    start_at = time.time() + 2.0  # every probe imported and pinned first
    procs = [mp.Process(target=_probe, args=(c, args.seconds, start_at, out)) for c in cores]
    for proc in procs:
        proc.start()
    got = dict(out.get() for _ in procs)
    for proc in procs:
        proc.join()
    windows = int(np.ceil(args.seconds / WINDOW_S))
    table = np.full((windows, len(cores)), np.nan)
    for j, core in enumerate(cores):
        rows = np.array(got[core])
        for w in range(windows):
            sel = rows[(rows[:, 0] >= w * WINDOW_S) & (rows[:, 0] < (w + 1) * WINDOW_S), 1]
            if len(sel):
                table[w, j] = np.median(sel)
    fast = np.nanmin(table, axis=0)  # each core's best window
    print("window  " + " ".join(f"c{c:<5d}" for c in cores) + "  cores slow (>1.4x best)")
    for w in range(windows):
        slow = int(np.nansum(table[w] > 1.4 * fast))
        print(f"{w * WINDOW_S:5.0f} s " + " ".join(f"{x:6.2f}" for x in table[w])
              + f"  {slow}")
    slow_share = np.nanmean(table > 1.4 * fast, axis=0)
    print("share of windows slow per core: "
          + ", ".join(f"c{c} {s:.0%}" for c, s in zip(cores, slow_share)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
