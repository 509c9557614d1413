"""Does device activity that holds no timing lock reach a timed call? (issue 14: an honest
PyTorch-only candidate, KernelBench level1/25's Swish on 6.4 GB, was flagged
`work_outside_call` once in the H200's corpus pass: "the device was still busy when 2
timed calls began", while its own work was all synchronized.)

Two things run beside a timing step on purpose: the reference server's exports of output
buffers for the next samples (cuMemAlloc and an IPC handle, no kernel:
wire/device.Exported) and spare children creating their CUDA context while they wait
(isolation/child.py). This times calls the way a candidate's child does (the device-wide
wait the idle check takes before each call, `timing.device_wait_ms`, then the call on
`timing.timer_for`'s timer) while one neighbour does one of those, and prints per mode
how many idle checks blocked over threads.BUSY_WAIT_MS (not preempted: the wall-time rule
the check had), the thread's CPU time in each, and what the calls timed.

Found on the H200 (code 8e07132, a 1 GiB elementwise call of ~2.26 ms): no neighbour
made a check block or moved the calls' median, though contexts, exports and teardowns
made the slowest calls slower (max 3.8-5.5 ms against 2.7 ms); calls during a free ran
at 2.51 ms against 2.28 ms; `pending` blocked every check ~1.02 ms with ~1.03 ms of CPU,
and `cpu` once blocked 0.52 ms with 0.09 ms of CPU: a host stall, now told apart by the
CPU time (threads.busy).

    python benchmarks/neighbour_noise.py [--seconds 15] [--gib 6] [--modes idle exports ...]

Modes: `idle` (no neighbour), `exports` (allocate and export --gib GiB in 1.5 GiB buffers,
hold them 0.2 s, free them: the free as well, which the evaluator runs in a shared turn,
to tell the two apart by time), `contexts` (two processes at a time creating a CUDA
context and one tensor, as spare children do), `frees` (only the frees of `exports`
counted: busy checks that fell inside a free), `teardown` (a process that allocated --gib
GiB ends, again and again: a finished child's context destroyed beside the next timing
step), `cpu` (busy loops on every other core, four more than cores, as cold builds
load the host). The calls launch from the last core, as the eval's timing steps do
(schedule/pinning.py), and the neighbours never run there. `pending` (no neighbour: this
process leaves ~1 ms of its own work on a side stream before each check, what the check
is for) shows what a wait for pending work looks like, its CPU time included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb_eval import timing  # noqa: E402
from kb_eval.eval.child.threads import BUSY_WAIT_MS  # noqa: E402

BUFFER_BYTES = 3 << 29  # 1.5 GiB
MODES = ["idle", "exports", "contexts", "frees", "teardown", "cpu", "pending"]


def neighbour(mode: str, seconds: float, gib: float, log: Path) -> None:
    """Runs in its own process: `mode`'s activity until `seconds` pass; each event's
    (kind, start, end) in CLOCK_MONOTONIC seconds, written to `log`."""
    events, end = [], time.monotonic() + seconds
    if mode == "exports":
        from kb_eval.eval.wire.device import Exported

        device = torch.device("cuda", 0)
        torch.cuda.init()
        n = max(1, int(gib * (1 << 30) // BUFFER_BYTES))
        while time.monotonic() < end:
            t0 = time.monotonic()
            exported = Exported(n, BUFFER_BYTES, device)
            t1 = time.monotonic()
            time.sleep(0.2)
            t2 = time.monotonic()
            exported.free()
            t3 = time.monotonic()
            events += [("alloc", t0, t1), ("free", t2, t3)]
            time.sleep(0.3)
    elif mode == "teardown":
        code = (f"import torch; x = torch.empty({int(gib * (1 << 30))}, dtype=torch.uint8, "
                "device='cuda'); torch.cuda.synchronize()")
        while time.monotonic() < end:
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", code])
            events.append(("teardown", t0, time.monotonic()))
    elif mode == "cpu":
        burners = [subprocess.Popen(["timeout", str(seconds), "yes"],
                                    stdout=subprocess.DEVNULL)
                   for _ in range(os.cpu_count() + 4)]
        t0 = time.monotonic()
        for b in burners:
            b.wait()
        events.append(("cpu", t0, time.monotonic()))
    elif mode == "contexts":
        code = "import torch; torch.cuda.init(); torch.empty(1, device='cuda')"
        while time.monotonic() < end:
            t0 = time.monotonic()
            procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
            for p in procs:
                p.wait()
            events.append(("contexts", t0, time.monotonic()))
    else:
        time.sleep(seconds)
    log.write_text(json.dumps(events))


def observe(seconds: float, device: torch.device, x: torch.Tensor,
            pending: bool = False) -> list[tuple]:
    """(time, idle check's wait in ms or None, call ms, the check's CPU ms) per call, for
    `seconds`. The CPU time tells a wait the thread spun through (work pending on the
    device: the driver spins while it waits) from one it slept or was held off the core.
    `pending`: ~1 ms of our own work left on a side stream before each check (what the
    check is for), to see what such a wait looks like."""
    timer, side = timing.timer_for(device), torch.cuda.Stream(device)
    rows, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        if pending:
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000)  # ~1 ms at 1980 MHz
        t, cpu = time.monotonic(), time.thread_time()
        waited = timing.device_wait_ms(device)
        cpu_ms = (time.thread_time() - cpu) * 1e3
        ms, out = timer.time_one(lambda a: a / (1.0 + torch.exp(-a)), [x])
        del out
        rows.append((t, waited, ms, cpu_ms))
    return rows


def inside(t: float, events: list, kinds: set[str]) -> bool:
    return any(k in kinds and a - 0.001 <= t <= b + 0.001 for k, a, b in events)


def report(mode: str, rows: list[tuple], events: list) -> None:
    waits = [w for _, w, _, _ in rows if w is not None]
    busy = [(t, w, c) for t, w, _, c in rows if w is not None and w > BUSY_WAIT_MS]
    calls = sorted(r[2] for r in rows)
    kinds = {"exports": {"alloc"}, "frees": {"free"}}.get(mode, {mode})
    during = [r for r in rows if inside(r[0], events, kinds)]
    quiet = [r for r in rows if not inside(r[0], events, {k for k, _, _ in events})]
    med = statistics.median
    print(f"{mode:9s} calls {len(rows):5d}  busy checks {len(busy):3d} "
          f"(in the neighbour's {'/'.join(sorted(kinds)) or '-'}: "
          f"{sum(inside(t, events, kinds) for t, _, _ in busy)}; "
          f"preempted {len(rows) - len(waits)})  "
          f"wait p50 {med(waits):.3f} max {max(waits):.2f} ms  "
          f"call p50 {med(calls):.3f} p99 {calls[int(0.99 * (len(calls) - 1))]:.3f} "
          f"max {calls[-1]:.3f} ms", flush=True)
    if busy:
        print(f"{'':9s} busy checks (wait ms / CPU ms): "
              + ", ".join(f"{w:.2f}/{c:.2f}" for _, w, c in busy[:12]), flush=True)
    if during and quiet:
        print(f"{'':9s} calls during it: {len(during)}, median {med([r[2] for r in during]):.3f} "
              f"ms, max {max(r[2] for r in during):.3f}; outside it {len(quiet)}, median "
              f"{med([r[2] for r in quiet]):.3f} ms", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0, help="per mode")
    p.add_argument("--gib", type=float, default=6.0, help="exports: GiB allocated a time")
    p.add_argument("--modes", nargs="+", default=["idle", "exports", "contexts", "frees"],
                   choices=MODES)
    p.add_argument("--neighbour", nargs=3, metavar=("MODE", "SECONDS", "LOG"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.neighbour:
        mode, seconds, log = args.neighbour
        neighbour(mode, float(seconds), args.gib, Path(log))
        return 0
    if not torch.cuda.is_available():
        sys.exit("neighbour_noise: needs a CUDA GPU")
    device = torch.device("cuda", 0)
    cores = sorted(os.sched_getaffinity(0))
    others = ",".join(map(str, cores[:-1] or cores))  # the neighbours' cores
    os.sched_setaffinity(0, {cores[-1]})  # the timing core (pinning.py)
    x = torch.rand(1 << 28, device=device)  # 1 GiB in, 1 GiB out a call
    observe(1.0, device, x)  # warm: allocator blocks, the timer's calibration
    log = Path("/tmp/neighbour_noise.json")
    for mode in args.modes:
        moving = {"frees": "exports", "pending": "idle"}.get(mode, mode)
        proc = subprocess.Popen(["taskset", "-c", others, sys.executable, __file__, "--gib",
                                 str(args.gib), "--neighbour", moving, str(args.seconds),
                                 str(log)])
        # its start-up (torch's import)
        time.sleep(2.0 if moving in ("contexts", "teardown") else 1.0)
        rows = observe(args.seconds - 2.0, device, x, pending=mode == "pending")
        proc.wait()
        report(mode, rows, json.loads(log.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
