"""Where the ~0.1 ms "slow state" of timed calls (docs/GUARANTEES.md, baseline drift) came
from: `steps`, `waits` and `calib` found it in the timer's own charge for late work on
other streams (fixed); the other probes are the hypotheses it ruled out on the way.
KernelBench level1/5's call (A * s: a 4 GiB input, a fresh 4 GiB output each call), timed
as the eval times it (kb_eval.timing: L2 flush, launch cover, CUDA events):

    python benchmarks/slow_state_probe.py buffers    # K input sets interleaved call by call
    python benchmarks/slow_state_probe.py allocator  # the output cached, vs cudaMalloc'd in the call
    python benchmarks/slow_state_probe.py churn      # before and after the process churned memory
    python benchmarks/slow_state_probe.py clock      # the SM clock of each call, from a sleep kernel
    python benchmarks/slow_state_probe.py variants   # which part of our timing path shows it
    python benchmarks/slow_state_probe.py thermal    # the state against HBM temperature
    python benchmarks/slow_state_probe.py steps      # a bare loop to time_one, step by step
    python benchmarks/slow_state_probe.py waits      # the wait after a call, four ways
    python benchmarks/slow_state_probe.py calib      # the idle wait after each kind of kernel

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
GPU with ~40 GB free (`churn`: most of it). `thermal`: phases of level1/5's calls, each
after the baseline's per-call input work (a 4 GiB draw copied into the call's buffer:
three times the call's own memory traffic) or alone with the GPU idle 5 ms between calls,
then a rest; after every call NVML's memory (HBM) and GPU temperatures, power and clocks.
Prints 2-second windows and the slow share by memory temperature: a state that follows
the HBM's temperature (DRAM refreshes faster when hot) and not the phase's own work.
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


def _gpu_state(device: torch.device) -> tuple:
    """(HBM C, GPU C, W, SM MHz, memory MHz) of `device`, from kb_eval.gpu_state."""
    from kb_eval.gpu_state import snapshot
    g = snapshot(device)
    if g is None:
        raise SystemExit("slow_state_probe thermal: NVML cannot be read here")
    return g["mem_temp_c"], g["temp_c"], g["power_w"], g["sm_mhz"], g["mem_mhz"]


def thermal(device: torch.device, phase_s: float, cycles: int = 3, rest_s: float = 10.0,
            window_s: float = 2.0) -> None:
    a = torch.rand(SHAPE, device=device)
    buf = torch.empty_like(a)
    timer = timing._CudaTimer(device, True, 0.25)

    def heavy():
        x = torch.rand(SHAPE, device=device)
        buf.copy_(x)
        del x
        return timer.time_one(call, (buf,))[0]

    def light():
        time.sleep(0.005)
        return timer.time_one(call, (a,))[0]

    rows, t_start = [], time.perf_counter()  # (s, phase, ms, hbm, gpu C, W, sm, mem)
    for _ in range(cycles):
        for name, way in (("heavy", heavy), ("light", light)):
            t_end = time.perf_counter() + phase_s
            while time.perf_counter() < t_end:
                ms = way()
                rows.append((time.perf_counter() - t_start, name, ms, *_gpu_state(device)))
        time.sleep(rest_s)
        rows.append((time.perf_counter() - t_start, "rest", float("nan"), *_gpu_state(device)))
    fastest = min(r[2] for r in rows if r[1] != "rest")
    slow = lambda r: r[2] > fastest * 1.015  # noqa: E731
    med = statistics.median
    print(f"fastest call {fastest:.4f} ms; windows of {window_s:.0f} s:")
    print("  t(s)  phase  calls  median_ms  slow  hbm_C  gpu_C  power_W  sm_MHz  mem_MHz")
    w = 0
    while w * window_s < rows[-1][0]:
        part = [r for r in rows if w * window_s <= r[0] < (w + 1) * window_s]
        w += 1
        timed = [r for r in part if r[1] != "rest"]
        if not part:
            continue
        last = part[-1]
        print(f"{w * window_s:6.0f}  {last[1]:5s}  {len(timed):5d}  "
              + (f"{med(r[2] for r in timed):9.4f}  {sum(map(slow, timed)) / len(timed):4.2f}"
                 if timed else f"{'-':>9s}  {'-':>4s}")
              + f"  {last[3]!s:>5s}  {last[4]:5d}  {last[5]:7.1f}  {last[6]:6d}  {last[7]:7d}",
              flush=True)
    timed = [r for r in rows if r[1] != "rest" and r[3] is not None]
    for t in sorted({r[3] for r in timed}):
        at = [r for r in timed if r[3] == t]
        print(f"HBM {t} C: {len(at)} calls, slow share {sum(map(slow, at)) / len(at):.2f}, "
              f"median {med(r[2] for r in at):.4f} ms")
    for name in ("heavy", "light"):
        at = [r for r in timed if r[1] == name]
        if at:
            print(f"{name}: {len(at)} calls, slow share {sum(map(slow, at)) / len(at):.2f}")


def steps(device: torch.device, calls: int, blocks: int = 8) -> None:
    """level1/5's call in interleaved blocks of `calls`, from a bare loop (flush, 0.25 ms
    sleep, events, the output dropped at its launch, the end event waited for) to
    kb_eval.timing's `time_one`, one difference added per way: the output kept until
    the call is over, a device-wide synchronize after the end event, a third event
    recorded and waited for after it, the preemption check around the synchronize; then
    `time_one` itself, and it and the bare loop with the host idle 5 ms before each call.
    The way whose slow share jumps is the step that brings the state on."""
    a = torch.rand(SHAPE, device=device)
    timer = timing._CudaTimer(device, True, 0.25)
    flush = timer.flush_buf
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    cover = timer.cover_cycles

    def loop(keep=False, devsync=False, third=False, rusage=False, idle_ms=0.0):
        def run(n):
            out = []
            for _ in range(n):
                if idle_ms:
                    time.sleep(idle_ms / 1e3)
                flush.zero_()
                torch.cuda._sleep(cover)
                ev[0].record()
                y = call(a)
                if not keep:
                    y = None  # the output's block is free again before the call runs
                ev[1].record()
                ev[1].synchronize()
                if rusage:
                    timing.device_wait_ms(device)
                elif devsync:
                    torch.cuda.synchronize(device)
                if third:
                    ev[2].record()
                    ev[2].synchronize()
                out.append(ev[0].elapsed_time(ev[1]))
                del y
            return out
        return run

    def timed(idle_ms=0.0):
        def run(n):
            out = []
            for _ in range(n):
                if idle_ms:
                    time.sleep(idle_ms / 1e3)
                out.append(timer.time_one(call, (a,))[0])
            return out
        return run

    ways = {"bare": loop(), "+ output kept": loop(keep=True),
            "+ device synchronize": loop(keep=True, devsync=True),
            "+ third event": loop(keep=True, devsync=True, third=True),
            "+ preemption check": loop(keep=True, third=True, rusage=True),
            "time_one": timed(), "bare, 5 ms idle": loop(idle_ms=5.0),
            "time_one, 5 ms idle": timed(5.0)}
    got: dict[str, list[list[float]]] = {k: [] for k in ways}
    for _ in range(blocks):
        for name, run in ways.items():
            got[name].append(run(calls))
    fastest = min(x for runs in got.values() for r in runs for x in r)
    for name, runs in got.items():
        xs = [x for r in runs for x in r]
        shares = [sum(x > fastest * 1.015 for x in r) / len(r) for r in runs]
        print(f"{name:22s} median {statistics.median(xs):.4f} ms, slow share "
              f"{sum(x > fastest * 1.015 for x in xs) / len(xs):.2f} (per block "
              f"{' '.join(f'{v:.2f}' for v in shares)})", flush=True)


def waits(device: torch.device, calls: int, blocks: int = 6) -> None:
    """`time_one`'s judgement of each call taken apart: the host's device-wide wait after
    the call's end event on an idle device (None: this thread was preempted in it), held
    to time_one's threshold (3 x the calibrated wait + 0.02 ms), when the end is waited
    for in different ways: `event sync` (time_one's), `query first` (one cheap driver
    call before the timed wait), `polled` (the end event queried in a loop rather than
    waited on), `polled + query`. Blocks with the host idle 0 and 5 ms before each call.
    Prints per way and idle the share of calls judged busy and the waits' deciles."""
    a = torch.rand(SHAPE, device=device)
    timer = timing._CudaTimer(device, True, 0.25)
    sync_ms, _ = timer.latency
    limit = 3 * sync_ms + 0.02

    def polled():
        while not timer.end.query():
            pass

    ways = {"event sync": (timer.end.synchronize, False), "query first":
            (timer.end.synchronize, True), "polled": (polled, False),
            "polled + query": (polled, True)}
    rows = {(w, idle): [] for w in ways for idle in (0.0, 5.0)}
    for _ in range(blocks):
        for (way, idle_ms), got in rows.items():
            wait_end, query_first = ways[way]
            for _ in range(calls):
                if idle_ms:
                    time.sleep(idle_ms / 1e3)
                timer._pre_queue()
                timer.start.record()
                out = call(a)
                timer.end.record()
                wait_end()
                if query_first:
                    timer.start.query()
                got.append(timing.device_wait_ms(device))
                del out
    print(f"calibrated wait {sync_ms:.4f} ms, threshold {limit:.4f} ms")
    for (way, idle_ms), got in rows.items():
        xs = [w for w in got if w is not None]
        print(f"{way:15s} idle {idle_ms:.0f} ms: judged busy "
              f"{sum(w is None or w > limit for w in got) / len(got):.3f}, preempted "
              f"{(len(got) - len(xs)) / len(got):.3f}; waits deciles (ms) "
              + " ".join(f"{v:.4f}" for v in statistics.quantiles(xs, n=10)), flush=True)


def calib(device: torch.device, calls: int) -> None:
    """The host's device-wide wait on an idle device right after a kernel of each kind
    and its end event: the timer's calibration kernel (one float zeroed), the L2 flush
    (a 2x-L2 buffer zeroed), a 0.5 ms sleep kernel, a 1 GiB elementwise call and
    level1/5's 4 GiB one; the host idle 0 or 5 ms before each. Which kind's waits look
    like a real call's tells what the timer's threshold should be calibrated on."""
    a = torch.rand(SHAPE, device=device)
    g = a[: SHAPE[0] // 4]
    timer = timing._CudaTimer(device, True, 0.25)
    probe = torch.empty(1, device=device)
    rate = timer._sleep_rate()
    kinds = {"one float": probe.zero_, "flush": timer.flush_buf.zero_,
             "sleep 0.5 ms": lambda: torch.cuda._sleep(round(0.5 * rate)),
             "1 GiB call": lambda: call(g), "4 GiB call": lambda: call(a)}
    rows = {(k, idle): [] for k in kinds for idle in (0.0, 5.0)}
    for _ in range(4):
        for (kind, idle_ms), got in rows.items():
            for _ in range(calls):
                if idle_ms:
                    time.sleep(idle_ms / 1e3)
                out = kinds[kind]()
                timer.end.record()
                timer.end.synchronize()
                got.append(timing.device_wait_ms(device))
                del out
    print(f"calibrated wait {timer.latency[0]:.4f} ms, threshold "
          f"{3 * timer.latency[0] + 0.02:.4f} ms")
    for (kind, idle_ms), got in rows.items():
        xs = sorted(w for w in got if w is not None)
        qs = statistics.quantiles(xs, n=100)
        print(f"{kind:13s} idle {idle_ms:.0f} ms: p10 {qs[9]:.4f} p50 {qs[49]:.4f} p90 "
              f"{qs[89]:.4f} p99 {qs[98]:.4f} max {xs[-1]:.4f} ms, preempted "
              f"{len(got) - len(xs)}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("probe", choices=["buffers", "allocator", "churn", "clock", "variants",
                                          "thermal", "steps", "waits", "calib"])
    p.add_argument("--sets", type=int, default=4, help="input sets (buffers; default: 4)")
    p.add_argument("--calls", type=int, default=None,
                   help="timed calls per set (buffers, default 40) or per case (allocator, 30)")
    p.add_argument("--phase-s", type=float, default=20.0,
                   help="thermal: seconds of each phase (default: 20)")
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
    elif args.probe == "calib":
        calib(device, args.calls or 150)
    elif args.probe == "waits":
        waits(device, args.calls or 200)
    elif args.probe == "steps":
        steps(device, args.calls or 200)
    elif args.probe == "thermal":
        thermal(device, args.phase_s)
    elif args.probe == "clock":
        clock(device, args.calls or 1500, fresh=args.fresh)
    else:
        churn(timer, device, args.calls or 30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
