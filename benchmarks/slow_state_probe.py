"""Where the GPU's ~0.1 ms "slow state" (docs/GUARANTEES.md, baseline drift) does not come
from. KernelBench level1/5's call (A * s: a 4 GiB input, a fresh 4 GiB output each call),
timed as the eval times it (kb_eval.timing: L2 flush, launch cover, CUDA events):

    python benchmarks/slow_state_probe.py buffers    # K input sets interleaved call by call
    python benchmarks/slow_state_probe.py allocator  # the output cached, vs cudaMalloc'd in the call
    python benchmarks/slow_state_probe.py churn      # before and after the process churned memory

`buffers`: per-set medians, three allocations (freed and drawn again between them); equal
medians mean the speed is not a property of the memory a call reads and writes.
`allocator`: medians with the output block cached, then with `empty_cache()` before every
call, and the device allocations counted in each: what an allocation inside a timed call
costs, and whether a slow median came with any. `churn`: medians with the output cached,
then after the process allocated and freed most of the device in 1 GiB blocks (every
other one kept a while, then all given back): a long-lived process's memory, as the
reference server's. Needs a GPU with ~40 GB free (`churn`: most of it).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from kb_eval import timing

SHAPE = (65536, 16384)  # level1/5's A


def call(a: torch.Tensor) -> torch.Tensor:
    return a * 3.14


def buffers(timer, device: torch.device, sets: int, calls: int) -> None:
    for r in range(3):
        inputs = [torch.rand(SHAPE, device=device) for _ in range(sets)]
        for a in inputs:
            call(a)
        rows = [[] for _ in inputs]
        for k in range(sets * calls):
            rows[k % sets].append(timer.time_one(call, (inputs[k % sets],))[0])
        medians = [statistics.median(v) for v in rows]
        print(f"allocation {r}: per-set medians {' '.join(f'{m:.4f}' for m in medians)} ms, "
              f"spread {100 * (max(medians) - min(medians)) / min(medians):.2f} %", flush=True)
        del inputs
        torch.cuda.empty_cache()


def allocator(timer, device: torch.device, calls: int) -> None:
    a = torch.rand(SHAPE, device=device)
    for _ in range(3):
        call(a)
    for label, before in (("output cached", lambda: None),
                          ("empty_cache before each call", torch.cuda.empty_cache),
                          ("output cached again", lambda: None)):
        mallocs = torch.cuda.memory_stats(device)["num_device_alloc"]
        ms = []
        for _ in range(calls):
            before()
            ms.append(timer.time_one(call, (a,))[0])
        mallocs = torch.cuda.memory_stats(device)["num_device_alloc"] - mallocs
        print(f"{label}: median {statistics.median(ms):.4f} ms, min {min(ms):.4f}, "
              f"max {max(ms):.4f}, device allocations {mallocs}", flush=True)


def timed_median(timer, a: torch.Tensor, calls: int) -> float:
    return statistics.median(timer.time_one(call, (a,))[0] for _ in range(calls))


def fill(device: torch.device, elements: int) -> list[torch.Tensor]:
    """float32 blocks of `elements` each until the device has no room for another."""
    blocks = []
    try:
        while True:
            blocks.append(torch.empty(elements, device=device))
    except torch.OutOfMemoryError:
        return blocks


def churn(timer, device: torch.device, calls: int) -> None:
    a = torch.rand(SHAPE, device=device)
    for _ in range(3):
        call(a)
    print(f"fresh process: median {timed_median(timer, a, calls):.4f} ms", flush=True)
    for round_ in range(3):
        blocks = fill(device, 1 << 28)  # 1 GiB each
        n = len(blocks)
        del blocks[::2]
        torch.cuda.empty_cache()
        more = fill(device, 3 << 27)  # 1.5 GiB each
        del blocks, more
        torch.cuda.empty_cache()
        print(f"after churn {round_} ({n} GiB taken, half freed, refilled, all freed): median "
              f"{timed_median(timer, a, calls):.4f} ms", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probe", choices=["buffers", "allocator", "churn"])
    p.add_argument("--sets", type=int, default=4, help="input sets (buffers; default: 4)")
    p.add_argument("--calls", type=int, default=None,
                   help="timed calls per set (buffers, default 40) or per case (allocator, 30)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("slow_state_probe: needs a CUDA GPU")
    device = torch.device("cuda:0")
    timer = timing.timer_for(device, True, cover_ms=timing.TimingSettings().launch_cover_ms)
    if args.probe == "buffers":
        buffers(timer, device, args.sets, args.calls or 40)
    elif args.probe == "allocator":
        allocator(timer, device, args.calls or 30)
    else:
        churn(timer, device, args.calls or 30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
