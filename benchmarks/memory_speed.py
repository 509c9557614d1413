"""Does one large memory-bound call run at one speed? (issue 14: baseline drift.)

Times ReLU over a 6.4 GB fp32 tensor (KernelBench level-1 elementwise size) call after
call, L2 flushed before each, in four phases: the same buffer refilled, a fresh
allocation per call, 15 s idle then the same buffer again, and fresh allocations after
`empty_cache()`. Prints each phase's median and its 5-call medians (the baseline's
round size), NVML's temperatures, SM clock and power every 30 calls, and the times by
buffer address. Writes every call to OUT.json.

    python benchmarks/memory_speed.py OUT.json [--seconds 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import pynvml
import torch

N = 4096 * 393216  # floats: 6.4 GB


def nvml_state(handle) -> dict:
    def read(fn):
        try:
            return fn()
        except pynvml.NVMLError:
            return None
    return {"gpu_c": read(lambda: pynvml.nvmlDeviceGetTemperature(handle, 0)),
            "mem_c": read(lambda: pynvml.nvmlDeviceGetFieldValues(
                handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])[0].value.uiVal),
            "sm_mhz": read(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "watts": read(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) // 1000)}


def phase(name: str, seconds: float, fresh: bool, handle, rows: list) -> None:
    flush = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    x = torch.randn(N, device="cuda")
    t_end, i = time.time() + seconds, 0
    while time.time() < t_end:
        if fresh:
            del x
            x = torch.randn(N, device="cuda")
        else:
            x.normal_()
        flush.zero_()
        start.record()
        y = torch.relu(x)
        end.record()
        end.synchronize()
        row = {"phase": name, "ms": start.elapsed_time(end), "x": x.data_ptr(), "y": y.data_ptr()}
        if i % 30 == 0:  # an NVML read costs about a millisecond of host time
            row.update(nvml_state(handle))
        rows.append(row)
        del y
        i += 1


def summary(rows: list, name: str) -> None:
    ms = [r["ms"] for r in rows if r["phase"] == name]
    blocks = [statistics.median(ms[k:k + 5]) for k in range(0, len(ms), 5)]
    print(f"{name}: {len(ms)} calls, median {statistics.median(ms):.3f} ms, 5-call medians "
          f"{min(blocks):.3f}-{max(blocks):.3f} ms (first block {blocks[0]:.3f})")
    states = [r for r in rows if r["phase"] == name and "gpu_c" in r]
    for key in ("gpu_c", "mem_c", "sm_mhz", "watts"):
        vals = [r[key] for r in states if r[key] is not None]
        if vals:
            print(f"  {key}: {min(vals)}-{max(vals)}")
    by_address: dict[tuple, list] = {}
    for r in rows:
        if r["phase"] == name:
            by_address.setdefault((r["x"], r["y"]), []).append(r["ms"])
    for (x, y), v in by_address.items():
        print(f"  x {x:#x} y {y:#x}: {len(v)} calls, median {statistics.median(v):.3f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="JSON file of every call")
    p.add_argument("--seconds", type=float, default=25.0, help="length of each phase")
    args = p.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    rows: list = []
    phase("same", args.seconds, False, handle, rows)
    phase("fresh", args.seconds, True, handle, rows)
    torch.cuda.synchronize()
    time.sleep(15)
    phase("same_after_idle", args.seconds, False, handle, rows)
    torch.cuda.empty_cache()
    phase("fresh_after_empty_cache", args.seconds * 0.6, True, handle, rows)
    with open(args.out, "w") as f:
        json.dump(rows, f)
    for name in ("same", "fresh", "same_after_idle", "fresh_after_empty_cache"):
        summary(rows, name)


if __name__ == "__main__":
    main()
