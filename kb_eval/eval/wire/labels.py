"""Names of the checked calls of a sample, as files and result keys use them.

    correct_<i>             correctness trial i (inputs from the run's secret seed)
    shape_0                 the shape probe (a smaller batch)
    timing_<i>_<seed hex>   timed call i, re-checked, with the OS-random seed of its inputs
"""

from __future__ import annotations

import re

PROBE_LABEL = "shape_0"
TIMED_LABEL = re.compile(r"timing_(\d+)_([0-9a-f]{1,16})")
_ANY_LABEL = re.compile(r"([a-z]+)_(\d+)(?:_([0-9a-f]{1,16}))?")


def label_name(label) -> str:
    """("correct", 3) -> correct_3; ("timing", 7, seed) -> timing_7_<seed hex>."""
    kind, i, *seed = label
    return f"{kind}_{i}" + (f"_{seed[0]:x}" if seed and seed[0] is not None else "")


def parse_label(name: str) -> list:
    """correct_3 -> [correct, 3]; timing_7_<seed hex> -> [timing, 7, seed]."""
    m = _ANY_LABEL.fullmatch(name)
    if m is None:
        raise ValueError(f"not a label: {name!r}")
    return [m.group(1), int(m.group(2))] + ([int(m.group(3), 16)] if m.group(3) else [])
