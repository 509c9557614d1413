"""How a model is built, fed and timed inside a child: one recipe for the reference (in
baseline and eval) and the candidate, so their times are comparable.

Every timed call gets freshly drawn inputs (outside the timed region), so a kernel cannot
serve a cached answer keyed by pointer or content.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import torch

from kb_eval.inputs import (build_model, derive_seed, make_init_inputs, make_inputs,
                            precision_dtype, set_precision_flags)
from kb_eval.problems import load_module
from kb_eval.timing import TimingSettings, TimingStats, time_samples

INIT_SEED = 42  # weights are not secret: the candidate gets the reference's weights anyway


def pick_device(requested: str | None = None) -> torch.device:
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_problem(code: str, precision: str, device: torch.device) -> tuple[ModuleType, list]:
    set_precision_flags(precision)
    module = load_module(code, "kb_problem")
    return module, make_init_inputs(module.get_init_inputs, device)


def reference_model(module: ModuleType, init: list, precision: str,
                    device: torch.device) -> torch.nn.Module:
    return build_model(module.Model, init, INIT_SEED, device, precision_dtype(precision))


def inputs_for(module: ModuleType, secret: int, label: Any, precision: str,
               device: torch.device) -> list:
    return make_inputs(module.get_inputs, derive_seed(secret, label), device,
                       precision_dtype(precision))


def time_model(model: Callable, module: ModuleType, secret: int, precision: str,
               device: torch.device, settings: TimingSettings) -> TimingStats:
    """Time `model` on fresh inputs per call, with the candidate child's bookkeeping around
    each call (eval/child/calls.py), which slows host-paced calls on both sides alike."""
    return TimingStats.of(*time_model_samples(model, module, secret, precision, device,
                                              settings))


def time_model_samples(model: Callable, module: ModuleType, secret: int, precision: str,
                       device: torch.device, settings: TimingSettings,
                       visit: int = 0) -> tuple[list[float], float | None]:
    """`time_model`'s kept call times (ms, in call order) and median launch time; each
    baseline `visit` draws other inputs."""
    from kb_eval.eval.child.calls import TimedCalls, Watch, round_ends

    def draw(i: int) -> tuple[None, list]:
        label = ("timing", i) if visit == 0 else ("timing", visit, i)
        return None, inputs_for(module, secret, label, precision, device)

    n_calls = settings.n_calls
    calls = TimedCalls(model, Watch(device), device, draw, round_ends([], n_calls), n_calls,
                       candidate=False)
    with torch.no_grad():
        return time_samples(calls.call, settings, device, calls.args, calls.on_output)


def compile_model(model: torch.nn.Module, mode: str) -> Callable:
    """torch.compile modes for the baseline: default, reduce-overhead, max-autotune."""
    return torch.compile(model, mode=None if mode == "default" else mode)
