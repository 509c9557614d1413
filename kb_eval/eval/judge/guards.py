"""Guards, judge side: each call's observations (child/observe.py) turned into `Flag`s;
severity `error` makes a sample incorrect."""

from __future__ import annotations

from collections.abc import Iterator

from kb_eval.results import Flag


def judge(candidate_seen: dict[str, dict], reference_seen: dict[str, dict]) -> list[Flag]:
    """Flags for behaviour the candidate shows and the reference does not (per label)."""
    flags = [Flag(code=code, severity="error", message=f"{label}: {message}")
             for label, seen in candidate_seen.items()
             for code, message in _unlike_reference(seen, reference_seen.get(label, {}))]
    return dedupe(flags)


def _unlike_reference(seen: dict, ref: dict) -> Iterator[tuple[str, str]]:
    """(code, message) for what a candidate call did that the reference's did not."""
    if seen.get("aliased") and not ref.get("aliased"):
        yield "output_aliases_input", f"output(s) {seen['aliased']} share memory with an input"
    if "devices" in ref and seen.get("devices", ref["devices"]) != ref["devices"]:
        yield "output_device", f"outputs on {seen['devices']}, the reference's on {ref['devices']}"
    if seen.get("mutated") and not ref.get("mutated"):
        yield "input_mutated", f"input(s) {seen['mutated']} were modified by the call"
    if seen.get("unsettled"):
        yield ("output_changed_after_return", "the output was still being written after the "
               "call returned (work hidden from the timer)")


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
