"""The candidate's side of a paired timing (schedule/pairing.py): its rounds, a handshake
before each so the parent can stop this process while the reference's rounds are timed."""

from __future__ import annotations

import statistics
from pathlib import Path

import torch

from kb_eval import clocks
from kb_eval.eval.child.probes import sync
from kb_eval.timing import (SPENT, TimingSettings, TimingStats, kept, round_timer, spent,
                            take_launch_ms, time_calls)


# the number of rounds of a candidate timed in fewer (written before the first handshake)
ROUNDS_FILE = "rounds"


def time_paired(fn, settings: TimingSettings, device: torch.device, args, on_output,
                 folder: Path, rounds: list[range], untimed_ended,
                 check_idle=lambda: None) -> TimingStats:
    """Per round, a handshake, one untimed call (`settings.round_untimed`) then the timed
    ones; rounds are their medians. `check_idle` runs before each later handshake, whose
    synchronize would otherwise absorb work left running."""
    for i in range(settings.warmup):
        fn(*args(-1 - i))
    samples, medians = [], []
    timer = round_timer(device, settings)
    take_launch_ms(timer)
    for r, calls in enumerate(rounds):
        if r:
            check_idle()
        handshake(folder, r, device)
        busy_s = 0.0
        if settings.round_untimed:
            started = clocks.perf_counter()
            fn(*args(-1 - settings.warmup - r))  # the round's first call: not timed (either side)
            untimed_ended()  # an untimed call returns synchronized (calls.py)
            busy_s = clocks.perf_counter() - started
            SPENT["untimed"] += busy_s
        # spins the GPU up after the wait, less the untimed call's time
        timer = round_timer(device, settings, busy_s)
        ms = kept(settings, r, time_calls(fn, calls, timer, args, on_output, collect=r == 0))
        samples += ms
        medians.append(statistics.median(ms))
    check_idle()
    handshake(folder, len(rounds), device)
    return TimingStats.of(samples).model_copy(update={"rounds": medians,
                                                       "launch_ms": take_launch_ms(timer)})


HANDSHAKE_WAIT_S = 300.0


def handshake(folder: Path, r: int, device: torch.device) -> None:
    """Tell the parent round `r` may start, wait for its go (bounded). A forged go gains
    nothing: the parent stops this process group whatever the files say."""
    with spent("handshake"):  # the reference's rounds are in it
        sync(device)
        (folder / f"ready_{r}").write_text("")
        deadline = clocks.monotonic() + HANDSHAKE_WAIT_S
        while not (folder / f"go_{r}").exists() and clocks.monotonic() < deadline:
            clocks.sleep(0.0005)
