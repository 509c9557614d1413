"""The child side of the baseline: build one reference and time it (runs isolated)."""

from __future__ import annotations

from pathlib import Path

from kb_eval.harness import (compile_model, load_problem, pick_device, reference_model,
                             time_model)
from kb_eval.timing import TimingSettings


def time_reference(payload: dict, workdir: Path) -> dict:
    device = pick_device(payload.get("device"))
    precision = payload["precision"]
    module, init = load_problem(payload["code"], precision, device)
    model = reference_model(module, init, precision, device)
    if payload.get("mode", "eager") != "eager":
        model = compile_model(model, payload["mode"].removeprefix("compile-"))
    settings = TimingSettings.model_validate(payload["timing"])
    stats = time_model(model, module, payload["secret"], precision, device, settings)
    return {"timing": stats.model_dump()}
