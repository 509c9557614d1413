"""The problems the reference server keeps loaded: module, model, fixed labels' outputs
(under a memory budget) and live compiled baselines, so a later sample computes only its
timed calls' outputs."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from types import ModuleType

import torch

from kb_eval.compilers.tvm import baseline_callable as tvm_callable, is_tvm_mode
from kb_eval.eval.child.calls import Watch
from kb_eval.eval.child.probes import tensor_bytes
from kb_eval.eval.wire.reference import ProblemRequest
from kb_eval.harness import compile_model, load_problem, reference_model
from kb_eval.inputs import set_precision_flags

MAX_PROBLEMS = 8  # problems kept loaded (models hold their weights)


@dataclass
class Problem:
    module: ModuleType
    model: torch.nn.Module
    outputs: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    seen: dict[str, dict] = field(default_factory=dict)
    truth: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # float64 outputs
    truth_error: str | None = None  # the reference cannot run in float64: why
    first: list | None = None  # fingerprints of correct_0's outputs: input-independent?
    peak_bytes: int | None = None  # the device memory a forward took, inputs included
    # per baseline mode other than eager: the compiled model, or why the compiler failed
    compiled: dict[str, object] = field(default_factory=dict)
    _watch: Watch | None = None

    def watch(self, device: torch.device) -> Watch:
        """This process's own Watch for its timed calls (calls.py); never read here."""
        if self._watch is None:
            self._watch = Watch(device)
        return self._watch

    @property
    def bytes(self) -> int:
        return sum(tensor_bytes(ts) for ts in (*self.outputs.values(), *self.truth.values()))

    def forget_outputs(self) -> None:
        self.outputs.clear()
        self.seen.clear()
        self.truth.clear()


LOADED: OrderedDict[str, Problem] = OrderedDict()  # least recently used first


def loaded_problem(payload: ProblemRequest, device: torch.device) -> Problem:
    """The problem's module and model, loaded once per (code, precision, seed, device)."""
    precision = payload.precision
    key = hashlib.sha256(repr((payload.problem_code, precision, payload.seed,
                               str(device))).encode()).hexdigest()
    set_precision_flags(precision)  # every call: nothing a problem's code did may linger
    if key in LOADED:
        LOADED.move_to_end(key)
        return LOADED[key]
    module, init = load_problem(payload.problem_code, precision, device)
    LOADED[key] = Problem(module, reference_model(module, init, precision, device))
    while len(LOADED) > MAX_PROBLEMS:
        LOADED.popitem(last=False)
    return LOADED[key]


def baseline_model(p: Problem, payload: ProblemRequest, device: torch.device):
    """What a live baseline times: the reference (eager) or it compiled per
    `payload.baseline_mode`, once per problem and mode; a string says why not."""
    mode = payload.baseline_mode or "eager"
    if mode == "eager":
        return p.model
    if mode not in p.compiled:
        try:
            if is_tvm_mode(mode):
                p.compiled[mode] = tvm_callable(p.model, p.module, payload.seed,
                                                payload.precision, device, mode)[0]
            else:
                p.compiled[mode] = compile_model(p.model, mode.removeprefix("compile-"))
        except Exception as e:  # noqa: BLE001 - the compiler's limit, nobody's fault
            p.compiled[mode] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return p.compiled[mode]
