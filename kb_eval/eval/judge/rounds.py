"""The reference server's side of a paired timing (schedule/pairing.py), and the rough
estimate of one call that sizes each sample's timed calls."""

from __future__ import annotations

import torch

from kb_eval import clocks
from kb_eval.eval.child.calls import TimedCalls
from kb_eval.eval.child.probes import sync
from kb_eval.eval.judge.loaded import LOADED, baseline_model, loaded_problem
from kb_eval.eval.schedule.memplan_server import release, with_room
from kb_eval.eval.wire.reference import EstimateRequest, RoundsRequest
from kb_eval.faults import inject_fault
from kb_eval.harness import inputs_for
from kb_eval.timing import (SPENT, TimingSettings, busy_ms_before_quiet, kept, paired_rounds,
                            round_timer, spent, spent_since, take_launch_ms, time_calls)


def time_rounds(payload: RoundsRequest, device: torch.device) -> dict:
    """The reference's `payload.rounds` of a paired timing, back to back, the candidate's
    child stopped: {"rounds": one answer each} or {"error"}. Out of memory, a round is
    tried once more with cached outputs given back."""
    answers = []
    for i, r in enumerate(payload.rounds):
        def one_round(r=r, first=i == 0) -> dict:
            inject_fault("round_oom", torch.OutOfMemoryError)
            return _time_round(payload, device, r, wait_quiet=first)

        try:
            answers.append(with_room(one_round, device, give_back=_give_back_cached))
        except torch.OutOfMemoryError as e:
            short = str(e).splitlines()[0][:200]
            return {"error": f"out of device memory beside the stopped candidate: {short}"}
        if "error" in answers[-1]:
            return answers[-1]
    return {"rounds": answers}


def _give_back_cached(device: torch.device) -> None:
    """Drop kept outputs and truths (recomputed when needed) and the cached blocks."""
    for p in LOADED.values():
        p.forget_outputs()
    release(device, force=True)


def _time_round(payload: RoundsRequest, device: torch.device, r: int, wait_quiet: bool) -> dict:
    entered, spent_before = clocks.perf_counter(), SPENT.copy()
    p = loaded_problem(payload, device)
    settings = payload.timing
    module, seed, precision = p.module, payload.seed, payload.precision

    timed = baseline_model(p, payload, device)
    if isinstance(timed, str):  # the compiler's limit: an answer, not a failed server call
        return {"error": f"no {payload.baseline_mode} baseline: {timed}"}
    # kernels the stopped candidate queued may still run: wait them out, say how long
    with spent("quiet"):
        busy_ms = busy_ms_before_quiet(device) if wait_quiet and device.type == "cuda" else 0.0
    # the candidate child's bookkeeping (calls.py) slows a host-bound call: both sides do it
    rounds = paired_rounds(settings)
    calls_r = rounds[r]
    calls = TimedCalls(timed, p.watch(device), device,
                       lambda i: (None, inputs_for(module, seed, ("timing", i), precision,
                                                   device)),
                       set(), len(calls_r), candidate=False)
    with torch.no_grad():
        timer = _untimed_calls(calls, settings, r, device)
        ms = kept(settings, r, time_calls(calls.call, calls_r, timer, calls.args,
                                          calls.on_output, collect=r == 0))
    # blocks stay cached until the last round, as the candidate's allocator keeps its own
    if r == len(rounds) - 1:
        release(device)
    SPENT["server"] += clocks.perf_counter() - entered
    return {"ms": ms, "busy_ms": busy_ms, "launch_ms": take_launch_ms(timer),
            "spent": spent_since(spent_before)}


def _untimed_calls(calls: TimedCalls, settings: TimingSettings, r: int,
                   device: torch.device):
    """The round's untimed call (and warmups before round 0) and the round's timer, as the
    candidate's."""
    untimed = int(settings.round_untimed)
    with spent("untimed"):
        for i in range(untimed + (settings.warmup if r == 0 else 0)):
            started = clocks.perf_counter()  # the last one is the round's untimed call
            calls.call(*calls.args(-1 - i))
            calls.untimed_ended()
        sync(device)
    timer = round_timer(device, settings, clocks.perf_counter() - started if untimed else 0.0)
    take_launch_ms(timer)
    return timer


def estimate_call(payload: EstimateRequest, device: torch.device) -> dict:
    """{"ms", "launch_ms"} of the second of two synchronized calls of the baseline model, by
    the host's clock: sizes a sample's timed calls, never a scored figure."""
    p = loaded_problem(payload, device)
    timed = baseline_model(p, payload, device)
    if isinstance(timed, str):
        return {"ms": None}
    inputs = inputs_for(p.module, payload.seed, ("timing", -1), payload.precision, device)
    with torch.no_grad():
        for _ in range(2):
            started = clocks.perf_counter()
            timed(*inputs)
            returned = clocks.perf_counter()
            sync(device)
    ms = (clocks.perf_counter() - started) * 1e3
    del inputs
    release(device)
    return {"ms": ms, "launch_ms": (returned - started) * 1e3 if device.type == "cuda" else None}
