"""Guards, judge side: the observations of each call (kb_eval/eval/child/observe.py, made
where the call ran) turned into `Flag`s; severity `error` makes a sample incorrect. The
other rules (tripwires, completeness, physical floor, constant references, shape probe)
are in `rules`, the static checks in `static`.
"""

from __future__ import annotations

from kb_eval.results import Flag


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
