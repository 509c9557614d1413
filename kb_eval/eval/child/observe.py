"""What one call of a model shows, observed where it ran (the candidate's child, and the
reference server the same way, so the reference's own habits are not held against the
candidate): exact tensor outputs, aliasing, mutated inputs, devices. judge/guards.py
turns these into flags.
"""

from __future__ import annotations

from typing import Any

import torch

class OutputTypeError(Exception):
    """The output is not an exact tensor or a tuple/list of exact tensors."""


def output_tensors(out: Any) -> list[torch.Tensor]:
    items = list(out) if type(out) in (tuple, list) else [out]
    for i, t in enumerate(items):
        if type(t) is not torch.Tensor:
            single = len(items) == 1 and type(out) not in (tuple, list)
            where = "the output" if single else f"output {i}"
            raise OutputTypeError(f"{where} is a {type(t).__module__}.{type(t).__qualname__}, "
                                  f"not an exact torch.Tensor")
    return items


def _storage_span(t: torch.Tensor) -> tuple[int, int, str] | None:
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.data_ptr() + s.nbytes(), str(t.device)
    except (RuntimeError, NotImplementedError):
        return None


def aliased_inputs(outputs: list[torch.Tensor], inputs: list) -> list[int]:
    """Indices of outputs whose storage overlaps an input tensor's storage."""
    spans = [sp for x in inputs if isinstance(x, torch.Tensor) and (sp := _storage_span(x))]
    hits = []
    for i, t in enumerate(outputs):
        sp = _storage_span(t)
        if sp and sp[1] > sp[0] and any(sp[2] == d and sp[0] < e and b < sp[1]
                                         for b, e, d in spans):
            hits.append(i)
    return hits


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal (NaN equals NaN; one pass over the data)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.is_floating_point():
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    return bool(torch.equal(a, b))


def mutated_inputs(inputs: list, pristine: list) -> list[int]:
    """Indices of tensor inputs that differ from the copies taken before the call."""
    return [i for i, (x, p) in enumerate(zip(inputs, pristine))
            if isinstance(x, torch.Tensor) and not _same(x, p)]


def observe(out: Any, inputs: list, pristine: list | None) -> tuple[list[torch.Tensor], dict]:
    """Check one call's output; returns its tensors and what was seen (JSON-able)."""
    tensors = output_tensors(out)
    seen = {"aliased": aliased_inputs(tensors, inputs), "devices": [t.device.type for t in tensors]}
    if pristine is not None:
        seen["mutated"] = mutated_inputs(inputs, pristine)
    return tensors, seen
