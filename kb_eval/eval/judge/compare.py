"""A sample's comparison in the reference server: `Model` runs on the labels asked and each
output is compared on the device with the candidate's file or buffer. With `compare.truth`
a label's float64 truth is computed only when the output is not truth.within_rounding.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch

from kb_eval.eval.child.observe import observe, output_tensors
from kb_eval.eval.child.probes import changed_since, fingerprints, probe_inputs, sync, tensor_bytes
from kb_eval.eval.judge.correctness import judge_file, resolve_tolerance
from kb_eval.eval.judge.floor import floor_metrics
from kb_eval.eval.judge.loaded import Problem, baseline_model, loaded_problem
from kb_eval.eval.judge.truth import Truth, computation_scale
from kb_eval.eval.schedule.memplan_server import note_peak, release, reset_peak, room_for, with_room
from kb_eval.eval.wire import outputs
from kb_eval.eval.wire.labels import label_name
from kb_eval.eval.wire.reference import CompareRequest
from kb_eval.faults import inject_fault
from kb_eval.harness import inputs_for, time_model
from kb_eval.inputs import cast_tree, make_inputs, precision_dtype, widened
from kb_eval.timing import spent

_STAGING = outputs.Staging()  # candidates' files are read into it, then copied to the GPU


def compare_labels(payload: CompareRequest, device: torch.device,
                   slots: list[torch.Tensor] | None) -> dict:
    """{"seen", "diffs", "tolerance"} of the reference on payload.labels against the
    candidate's outputs (files, or `slots`), plus floor metrics and timing when asked."""
    inject_fault("reference_kill")
    p = loaded_problem(payload, device)
    compare = payload.compare
    tol = resolve_tolerance(payload.precision, compare.atol, compare.rtol, compare.rule,
                            getattr(p.module, "KB_TOLERANCE", None))
    seen: dict[str, dict] = {}
    diffs: dict[str, dict] = {}
    refs = truth = None
    for label in payload.labels:
        kind, i, *rest = label
        label_seed = rest[0] if rest else None
        name = label_name((kind, i, label_seed))
        try:
            refs, seen[name], truth = _reference_outputs(p, payload, name, kind, i,
                                                         label_seed, device)
        except Exception as e:  # noqa: BLE001
            if kind == "correct":  # the problem's own trials: a broken reference
                raise
            # a probe or a candidate's seed: counted against that candidate only
            seen[name] = {"skipped": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
            continue
        with spent("judge"):
            diffs[name] = judge_file(Path(compare.folder) / f"{name}.out", refs,
                                     tol["atol"], tol["rtol"],
                                     _STAGING if device.type == "cuda" else None,
                                     truth if isinstance(truth, list) or callable(truth)
                                     else None, slots)
        if isinstance(truth, str):
            diffs[name]["f64_skipped"] = truth
        truth = None  # freed before the next label
    result: dict = {"seen": seen, "diffs": diffs, "tolerance": tol}
    _once_per_problem(p, payload, device, result)
    del refs, truth
    release(device)
    return result


def _once_per_problem(p: Problem, payload: CompareRequest, device: torch.device, result: dict) -> None:
    """The floor's metrics and a live baseline's timing into `result`, when asked."""
    if payload.metrics:
        with spent("metrics"):
            result["metrics"] = floor_metrics(p, payload, device)
    if payload.timing is not None:
        timed = baseline_model(p, payload, device)
        if isinstance(timed, str):
            result["timing_error"] = timed
        else:
            result["timing"] = time_model(timed, p.module, payload.seed, payload.precision,
                                          device, payload.timing).model_dump()


def _inputs(module: ModuleType, seed: int, kind: str, i: int, label_seed, precision: str,
            device: torch.device) -> list:
    if label_seed is not None:  # a timed call of a candidate: its own seed
        return make_inputs(module.get_inputs, label_seed, device, precision_dtype(precision))
    inputs = inputs_for(module, seed, (kind, i), precision, device)
    return probe_inputs(inputs) if kind == "shape" else inputs


def _reference_outputs(p: Problem, payload: CompareRequest, name: str, kind: str, i: int, label_seed,
                       device: torch.device):
    """(outputs, seen, float64 truth or why none) of the reference on one label; kept for
    a label without a seed when there is room."""
    want_truth = payload.compare.truth
    if name in p.outputs and (not want_truth or name in p.truth or p.truth_error):
        return p.outputs[name], p.seen[name], p.truth.get(name, p.truth_error)
    precision, seed = payload.precision, payload.seed
    if name in p.outputs:
        tensors, seen = p.outputs[name], p.seen[name]
    else:
        inputs = _inputs(p.module, seed, kind, i, label_seed, precision, device)
        with spent("reference"):
            tensors, seen = _run_reference(p, inputs, kind, device)
        del inputs  # gigabytes, maybe: the truth draws its own

    def keep(truth) -> None:
        kept = [tensors] + ([truth] if isinstance(truth, list) else [])
        if label_seed is None and room_for(tensor_bytes(kept), device,
                                           payload.keep_bytes):
            p.outputs[name], p.seen[name] = tensors, seen
            if isinstance(truth, list):
                p.truth[name] = truth

    if not want_truth or p.truth_error:
        keep(None)
        return tensors, seen, p.truth_error if want_truth else None

    def truth_now():
        # inputs drawn again: the reference may have changed those it ran on
        truth = float64_truth(p, _inputs(p.module, seed, kind, i, label_seed, precision,
                                         device), precision, device)
        keep(truth)
        return truth
    keep(None)
    return tensors, seen, truth_now  # judge_file asks only beyond the reference's rounding


def _run_reference(p: Problem, inputs: list, kind: str, device: torch.device):
    prints = fingerprints(inputs)  # not a copy: inputs may be gigabytes
    before = reset_peak(device)
    with torch.no_grad():
        out = with_room(lambda: p.model(*inputs), device)
    sync(device)
    note_peak(p, device, before)
    tensors, seen = observe(out, inputs, None)
    seen["mutated"] = changed_since(inputs, prints)
    tensors = [t.detach() for t in tensors]
    if kind == "correct":
        if p.first is None:
            p.first = fingerprints(tensors)
        else:
            seen["same_as_first"] = fingerprints(tensors) == p.first
    return tensors, seen


def float64_truth(p: Problem, inputs: list, precision: str,
                  device: torch.device) -> list[torch.Tensor] | str:
    """The reference in float64 on these rounded inputs, or why not (kept per problem)."""
    if p.truth_error:
        return p.truth_error
    try:
        with spent("truth"):
            scale = computation_scale(inputs, p.model)  # M of an output the truth zeroes
            with widened(p.model, precision_dtype(precision)) as model, torch.no_grad():
                # the widened inputs live only during the call
                out = with_room(lambda: model(*[cast_tree(x, torch.float64) for x in inputs]),
                                device)
                sync(device)
        return Truth([t.detach() for t in output_tensors(out)], scale)
    except Exception as e:  # noqa: BLE001 - an op without float64 support, a fixed dtype
        p.truth_error = ("the reference does not run in float64: "
                         f"{type(e).__name__}: {e}".splitlines()[0][:300])
        return p.truth_error
