"""Guards: checks that a candidate plays by the rules, beyond matching numbers.

Child side (run inside the worker, on the reference too, so rules the reference itself
breaks are not held against the candidate):
- `output_tensors`: the output is an exact `torch.Tensor` or a tuple/list of them (no
  subclass that could fake comparisons, no lazy object);
- `aliased_inputs`: which outputs share storage with an input (returning an input);
- `mutated_inputs`: which inputs changed during the call (compared with a copy made before);
- the device of each output (a GPU problem answered on the CPU is not an answer);
- whether the output changed after the call returned (`unsettled`, seen by the worker).
Parent side: `judge` turns the child's observations into `Flag`s; severity `error` makes a
sample incorrect. The other rules (tripwires, completeness, physical floor, constant
references, shape probe) are in `rules`, the static checks in `static`.
"""

from __future__ import annotations

from typing import Any

import torch

from kb_eval.results import Flag


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


# ------------------------------------------------------------------ parent side
def judge(candidate_seen: dict[str, dict], reference_seen: dict[str, dict]) -> list[Flag]:
    """Flags for behaviour the candidate shows and the reference does not (per label)."""
    flags: list[Flag] = []
    for label, seen in candidate_seen.items():
        ref = reference_seen.get(label, {})
        if seen.get("aliased") and not ref.get("aliased"):
            flags.append(Flag(code="output_aliases_input", severity="error",
                              message=f"{label}: output(s) {seen['aliased']} share memory "
                                      f"with an input"))
        if "devices" in ref and seen.get("devices", ref["devices"]) != ref["devices"]:
            flags.append(Flag(code="output_device", severity="error",
                              message=f"{label}: outputs on {seen['devices']}, the reference's "
                                      f"on {ref['devices']}"))
        if seen.get("mutated") and not ref.get("mutated"):
            flags.append(Flag(code="input_mutated", severity="error",
                              message=f"{label}: input(s) {seen['mutated']} were modified "
                                      f"by the call"))
        if seen.get("unsettled"):
            flags.append(Flag(code="output_changed_after_return", severity="error",
                              message=f"{label}: the output was still being written after "
                                      f"the call returned (work hidden from the timer)"))
    return dedupe(flags)


def dedupe(flags: list[Flag]) -> list[Flag]:
    """One flag per code (the first), with a count of the others in its message."""
    by_code: dict[str, list[Flag]] = {}
    for f in flags:
        by_code.setdefault(f.code, []).append(f)
    out = []
    for fs in by_code.values():
        f = fs[0]
        if len(fs) > 1:
            f = f.model_copy(update={"message": f"{f.message} (and {len(fs) - 1} more calls)"})
        out.append(f)
    return out
