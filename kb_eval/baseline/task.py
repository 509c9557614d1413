"""The baseline's child: build one reference, count its work and time it."""

from __future__ import annotations

import statistics
from pathlib import Path

import torch

from kb_eval import gpu_state, host_state
from kb_eval.compilers.tvm import baseline_callable as tvm_callable, is_tvm_mode
from kb_eval.eval.schedule import pinning
from kb_eval.harness import (compile_model, inputs_for, load_problem, pick_device,
                             reference_model, time_model_samples)
from kb_eval.timing import TimingSettings, TimingStats
from kb_eval.work import count_work


def time_reference(payload: dict, workdir: Path) -> dict:
    device = pick_device(payload.get("device"))
    precision = payload["precision"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()  # the current device (index may be None)
    module, init = load_problem(payload["code"], precision, device)
    model = reference_model(module, init, precision, device)
    reference = model
    work = count_work(module, precision, lambda: (reference, inputs_for(
        module, payload["secret"], ("work",), precision, device)), str(device))
    mode = payload.get("mode", "eager")
    compiler = None
    if is_tvm_mode(mode):  # export + TVM build happen here, before (untimed) warmup
        model, compiler = tvm_callable(model, module, payload["secret"], precision, device,
                                       mode)
    elif mode != "eager":
        model = compile_model(model, mode.removeprefix("compile-"))
    settings = TimingSettings.model_validate(payload["timing"])
    core = payload.get("core")
    if core is not None and pinning.pin(0, core) is None:  # this (launching) thread only
        core = None
    pace = payload.get("host_pace") or {}
    host_before, before = host_state.work_ms(), gpu_state.snapshot(device)
    paced = host_state.timed_at_full_pace(
        lambda: time_model_samples(model, module, payload["secret"], precision, device,
                                   settings, payload.get("visit", 0)),
        lambda timed: statistics.median(timed[0]), _launch_share, pace.get("best_ms"),
        pace.get("wait_s", 0.0), probe=lambda: host_state.launch_pace_ms(device))
    samples, launch_ms = paced.result
    gpu = {"before": before, "after": gpu_state.snapshot(device)} if before else None
    return {"samples_ms": samples, "launch_ms": launch_ms, "peak_mem_bytes": _peak(device),
            "compiler": compiler, "gpu": gpu, "core": core,
            "host_work_ms": [host_before, host_state.work_ms()],
            "launch_pace_ms": paced.pace_ms, "host_tries": paced.tries,
            "host_full_pace": paced.full_pace, "host_best_ms": paced.best_ms,
            "work": work.model_dump()}


def _launch_share(timed: tuple[list[float], float | None]) -> float | None:
    samples, launch_ms = timed
    return TimingStats.of(samples, launch_ms).launch_share if samples else None


def _peak(device: torch.device) -> int | None:
    """The most device memory this child held at once (None on a CPU); the eval plans
    each problem's memory from it."""
    return torch.cuda.max_memory_allocated() if device.type == "cuda" else None
