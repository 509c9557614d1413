"""The child side of evaluation: one candidate run, or one reference run (runs isolated).

`run_candidate` (candidate code runs here and nowhere else, besides its build child):
  problem loaded, reference weights built, every correctness input drawn  ->  candidate
  source exec'ed (its kernels load from the build cache)  ->  ModelNew built with the
  reference's weights  ->  one call per correctness trial, each output checked by the
  guards and saved as plain tensors  ->  timed on fresh inputs per call (the shared
  harness, same settings as the reference), a random few timed calls' outputs saved for
  re-checking.
`run_reference`: the same recipe with `Model`, saving outputs for the labels asked, and
timing the reference when the baseline is live.

Outputs are saved as `<label>.pt` (a list of CPU tensors); the parent loads them with
`weights_only=True` and compares. Seeds come in derived (never the run's secret), and the
correctness inputs are drawn before any candidate code runs. A `phase` file tells the
parent where a child that died was.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
import traceback
from pathlib import Path

import torch

from kb_eval.eval.guards import OutputTypeError, observe
from kb_eval.harness import (INIT_SEED, inputs_for, load_problem, reference_model,
                             time_model)
from kb_eval.inputs import build_model, copy_tree, precision_dtype
from kb_eval.problems import load_module
from kb_eval.timing import TimingSettings

CUDA_ERROR_MARKERS = ("CUDA error", "CUDA_ERROR", "illegal memory access", "cudaError",
                      "device-side assert", "unspecified launch failure")


def label_name(label) -> str:
    kind, i = label
    return f"{kind}_{i}"


def set_phase(workdir: Path, phase: str) -> None:
    (workdir / "phase").write_text(phase)


def save_outputs(path: Path, tensors: list[torch.Tensor]) -> None:
    torch.save([t.detach().to("cpu").contiguous().clone() for t in tensors], path)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def failure(status: str, phase: str, exc: BaseException) -> dict:
    text = f"{type(exc).__name__}: {exc}".strip()
    if any(m in text for m in CUDA_ERROR_MARKERS):
        status = "cuda_error"
    return {"status": status, "phase": phase, "error": text.splitlines()[0][:500],
            "detail": traceback.format_exc()[-6000:]}


def use_build_dirs(payload: dict) -> None:
    """Where load_inline and Triton find (or put) this source's build: its cache folder."""
    ext = payload.get("extensions_dir")
    if ext:
        os.environ["TORCH_EXTENSIONS_DIR"] = ext
        os.environ["TRITON_CACHE_DIR"] = str(Path(ext) / "triton")


# ------------------------------------------------------------------ candidate
def run_candidate(payload: dict, workdir: Path) -> dict:
    workdir = Path(workdir)
    device, precision = torch.device(payload["device"]), payload["precision"]
    seed, n_trials = payload["seed"], payload["correct_trials"]
    set_phase(workdir, "setup")
    use_build_dirs(payload)
    module, init = load_problem(payload["problem_code"], precision, device)
    ref_state = reference_model(module, copy_tree(init), precision, device).state_dict()
    # Drawn before candidate code exists in this process: it cannot steer them.
    trial_inputs = [inputs_for(module, seed, ("correct", i), precision, device)
                    for i in range(n_trials)]

    set_phase(workdir, "load")
    t0 = time.monotonic()
    try:
        candidate = load_module(payload["source"], "kb_candidate")
        model_cls = candidate.ModelNew
    except Exception as e:  # noqa: BLE001 - any failure to load is the candidate's
        return failure("compile_error", "load", e)
    load_s = time.monotonic() - t0
    try:
        model = build_model(model_cls, copy_tree(init), INIT_SEED, device,
                            precision_dtype(precision), ref_state)
    except Exception as e:  # noqa: BLE001
        return failure("runtime_error", "init", e)
    del ref_state

    set_phase(workdir, "correctness")
    seen: dict[str, dict] = {}
    for i, inputs in enumerate(trial_inputs):
        label = label_name(("correct", i))
        try:
            pristine = copy_tree(inputs)
            with torch.no_grad():
                out = model(*inputs)
            sync(device)
            tensors, seen[label] = observe(out, inputs, pristine)
            save_outputs(workdir / f"{label}.pt", tensors)
        except OutputTypeError as e:
            return {**failure("runtime_error", "correctness", e), "output_type": True}
        except Exception as e:  # noqa: BLE001
            return failure("runtime_error", "correctness", e)
        del out, tensors, pristine
    del trial_inputs

    result = {"status": "ok", "load_s": load_s, "seen": seen, "saved": list(seen)}
    if payload.get("timing") is not None:
        set_phase(workdir, "timing")
        try:
            result.update(_time_candidate(model, module, seed, payload, workdir, device, seen))
        except Exception as e:  # noqa: BLE001
            return {**failure("runtime_error", "timing", e), "seen": seen}
        result["saved"] = list(seen)
    return result


def _time_candidate(model, module, seed: int, payload: dict, workdir: Path,
                    device: torch.device, seen: dict) -> dict:
    settings = TimingSettings.model_validate(payload["timing"])
    n_calls = settings.trials + (1 if settings.discard_first else 0)
    # Which timed calls are re-checked is drawn after each call returns (selection
    # sampling), so the candidate cannot know in advance which calls count.
    wanted = [min(payload.get("recheck_timed", 0), n_calls)]
    left = [n_calls]

    def on_output(i: int, out) -> None:
        pick = wanted[0] > 0 and secrets.randbelow(left[0]) < wanted[0]
        left[0] -= 1
        if pick:
            wanted[0] -= 1
            label = label_name(("timing", i))
            tensors, seen[label] = observe(out, [], None)
            save_outputs(workdir / f"{label}.pt", tensors)

    stats = time_model(model, module, seed, payload["precision"], device, settings,
                       on_output=on_output)
    return {"timing": stats.model_dump()}


# ------------------------------------------------------------------ reference
def run_reference(payload: dict, workdir: Path) -> dict:
    """Outputs of `Model` for each label in payload["labels"] (saved to workdir), and
    its timing when payload["timing"] is given (live baseline)."""
    workdir = Path(workdir)
    device, precision, seed = torch.device(payload["device"]), payload["precision"], payload["seed"]
    module, init = load_problem(payload["problem_code"], precision, device)
    model = reference_model(module, init, precision, device)
    seen: dict[str, dict] = {}
    digests: dict[str, str] = {}  # the parent checks the files against these
    for kind, i in payload["labels"]:
        label = label_name((kind, i))
        inputs = inputs_for(module, seed, (kind, i), precision, device)
        pristine = copy_tree(inputs)
        with torch.no_grad():
            out = model(*inputs)
        sync(device)
        tensors, seen[label] = observe(out, inputs, pristine)
        save_outputs(workdir / f"{label}.pt", tensors)
        digests[label] = hashlib.sha256((workdir / f"{label}.pt").read_bytes()).hexdigest()
        del out, tensors, inputs, pristine
    result: dict = {"seen": seen, "digests": digests}
    if payload.get("timing") is not None:
        settings = TimingSettings.model_validate(payload["timing"])
        result["timing"] = time_model(model, module, seed, precision, device,
                                      settings).model_dump()
    return result
