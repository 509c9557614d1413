"""Where the GPU's ~0.1 ms "slow state" (docs/GUARANTEES.md, baseline drift) does not come
from. KernelBench level1/5's call (A * s: a 4 GiB input, a fresh 4 GiB output each call),
timed as the eval times it (kb_eval.timing: L2 flush, launch cover, CUDA events):

    python benchmarks/slow_state_probe.py buffers    # K input sets interleaved call by call
    python benchmarks/slow_state_probe.py allocator  # the output cached, vs cudaMalloc'd in the call
    python benchmarks/slow_state_probe.py churn      # before and after the process churned memory
    python benchmarks/slow_state_probe.py clock      # the SM clock of each call, from a sleep kernel
    python benchmarks/slow_state_probe.py variants   # which part of our timing path shows it

`buffers`: per-set medians, three allocations (freed and drawn again between them); equal
medians mean the speed is not a property of the memory a call reads and writes.
`allocator`: medians with the output block cached, then with `empty_cache()` before every
call, and the device allocations counted in each: what an allocation inside a timed call
costs, and whether a slow median came with any. `churn`: medians with the output cached,
then after the process allocated and freed most of the device in 1 GiB blocks (every
other one kept a while, then all given back): a long-lived process's memory, as the
reference server's. `clock`: before each call (level1/5's and a 4096 fp32 matmul, in
turn), a sleep kernel of a fixed count of SM cycles timed with its own events: its
duration is the SM clock's period (NVML's clock reading said 1980 MHz in both states).
Prints, per call kind, the sleep's median in fast and in slow calls and their correlation:
a ~3 % longer sleep in the slow calls means the slow state is a lower SM clock. Needs a
GPU with ~40 GB free (`churn`: most of it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

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


def clock(device: torch.device, calls: int, blocks: int = 4, rest_s: float = 5.0,
          fresh: bool = False) -> None:
    a = torch.rand(SHAPE, device=device)
    m = torch.rand(4096, 4096, device=device)
    kinds = {"level1/5 (A * s)": lambda: call(a), "matmul 4096 fp32": lambda: m @ m}
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size,
                        dtype=torch.uint8, device=device)
    cycles = 1_000_000
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for block in range(blocks):
        for i in range(calls):
            name = list(kinds)[i % 2]
            if fresh:  # as the baseline's path: a new draw, copied into the call's buffer
                a.copy_(torch.rand(SHAPE, device=device))
            flush.zero_()
            ev[0].record()
            torch.cuda._sleep(cycles)
            ev[1].record()
            kinds[name]()
            ev[2].record()
            ev[2].synchronize()
            rows[name].append((ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])))
        time.sleep(rest_s)
    for name, xs in rows.items():
        sleeps, times = zip(*xs)
        fast = min(times) * 1.015
        lo = [s for s, t in xs if t <= fast]
        hi = [s for s, t in xs if t > fast]
        med = statistics.median
        print(f"{name}: {len(xs)} calls, {len(hi)} slow (> min + 1.5 %); call median "
              f"{med(times):.4f} ms, min {min(times):.4f}; sleep of {cycles} cycles: fast calls "
              f"{med(lo):.5f} ms ({cycles / med(lo) / 1e3:.0f} MHz), slow calls "
              + (f"{med(hi):.5f} ms ({cycles / med(hi) / 1e3:.0f} MHz)" if hi else "-")
              + f"; correlation {statistics.correlation(sleeps, times):.3f}", flush=True)
        for b in range(blocks):  # the state over time: slow share per block
            part = xs[b * len(xs) // blocks:(b + 1) * len(xs) // blocks]
            print(f"  block {b}: slow share {sum(t > fast for _, t in part) / len(part):.2f}, "
                  f"sleep median {med(s for s, _ in part):.5f} ms", flush=True)


def variants(device: torch.device, calls: int, blocks: int = 4) -> None:
    """level1/5's call timed in interleaved blocks of `calls`, each block one way: a bare
    loop (flush, sleep, events) with a 0.5 and a 0.25 ms sleep, and with the GPU left idle
    2 or 20 ms before each call (the host's bookkeeping between calls leaves such gaps:
    does an idle GPU bring the state on?); our timer (0.25 ms cover)
    on one input and on inputs drawn fresh per call; the same with a 1 ms cover; and the
    baseline's own path (harness.time_model_samples: draws into buffers, the bookkeeping
    of calls.py). Per way: the share of calls over the fastest of all + 1.5 %, the median
    and the median host launch time (start event to end event recorded)."""
    from kb_eval.harness import load_problem, reference_model, time_model_samples

    code = next(Path(".cache/kernelbench/level1").glob("5_*.py")).read_text()
    module, init = load_problem(code, "fp32", device)
    model = reference_model(module, init, "fp32", device)
    a = torch.rand(SHAPE, device=device)
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size,
                        dtype=torch.uint8, device=device)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    rate = timing._CudaTimer(device, True, 0.25)._sleep_rate()

    def bare(sleep_ms, idle_ms=0.0):
        def run(n):
            out, launches = [], []
            for _ in range(n):
                time.sleep(idle_ms / 1e3)  # the GPU idle, as while a child does its bookkeeping
                flush.zero_()
                torch.cuda._sleep(round(sleep_ms * rate))
                t0 = time.perf_counter()
                ev[0].record()
                call(a)
                ev[1].record()
                launches.append((time.perf_counter() - t0) * 1e3)
                ev[1].synchronize()
                out.append(ev[0].elapsed_time(ev[1]))
            return out, statistics.median(launches)
        return run

    def timer_way(cover_ms, fresh):
        t = timing._CudaTimer(device, True, cover_ms)

        def run(n):
            out = []
            for _ in range(n):
                x = torch.rand(SHAPE, device=device) if fresh else a
                out.append(t.time_one(call, (x,))[0])
                del x
            return out, statistics.median(t.launch_ms[-n:])
        return run

    def baseline_way(cover_ms):
        settings = timing.TimingSettings(warmup=2, trials=calls, launch_cover_ms=cover_ms)
        return lambda n: time_model_samples(model, module, 1, "fp32", device, settings)

    ways = {"bare, 0.5 ms sleep": bare(0.5), "bare, 0.25 ms sleep": bare(0.25),
            "bare, 0.25, 2 ms idle before": bare(0.25, 2.0),
            "bare, 0.25, 20 ms idle before": bare(0.25, 20.0),
            "timer 0.25, one input": timer_way(0.25, False),
            "timer 0.25, fresh inputs": timer_way(0.25, True),
            "timer 1.0, fresh inputs": timer_way(1.0, True),
            "baseline path, 0.25": baseline_way(0.25), "baseline path, 1.0": baseline_way(1.0)}
    got: dict[str, list] = {k: [] for k in ways}
    for b in range(blocks):
        for name, run in ways.items():
            got[name].append(run(calls))
    fastest = min(min(x) for runs in got.values() for x, _ in runs)
    for name, runs in got.items():
        xs = [x for r, _ in runs for x in r]
        shares = " ".join(f"{sum(x > fastest * 1.015 for x in r) / len(r):.2f}" for r, _ in runs)
        launch = statistics.median(l for _, l in runs if l is not None) if any(
            l is not None for _, l in runs) else float("nan")
        print(f"{name:28s} median {statistics.median(xs):.4f} ms, slow share per block "
              f"{shares}, launch median {launch:.4f} ms", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probe", choices=["buffers", "allocator", "churn", "clock", "variants"])
    p.add_argument("--sets", type=int, default=4, help="input sets (buffers; default: 4)")
    p.add_argument("--calls", type=int, default=None,
                   help="timed calls per set (buffers, default 40) or per case (allocator, 30)")
    p.add_argument("--fresh", action="store_true",
                   help="clock: draw level1/5's input afresh before each call, copied into "
                        "its buffer (the baseline's path, where the slow state shows)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("slow_state_probe: needs a CUDA GPU")
    device = torch.device("cuda:0")
    timer = timing.timer_for(device, True, cover_ms=timing.TimingSettings().launch_cover_ms)
    if args.probe == "buffers":
        buffers(timer, device, args.sets, args.calls or 40)
    elif args.probe == "allocator":
        allocator(timer, device, args.calls or 30)
    elif args.probe == "variants":
        variants(device, args.calls or 200)
    elif args.probe == "clock":
        clock(device, args.calls or 1500, fresh=args.fresh)
    else:
        churn(timer, device, args.calls or 30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
