"""Precompiled headers made by builds of our own sources, never a candidate's.

Every later build includes them, so a candidate's build may read them but not write
them. Each builder makes the slim tier's header in its first build worker from a source
of ours (later via the front's `ensure_pch`); other builds meanwhile compile without it.
Torch's full header is made only with the slim tier off (KB_PCH_SLIM=0).
"""

from __future__ import annotations

import re
import shlex
import threading
from pathlib import Path

from kb_eval.eval.schedule import pch

PROBE = '''
import torch
from torch.utils.cpp_extension import load_inline

_cpp = "torch::Tensor kb_twice(torch::Tensor x) { return x * 2; }"
ext = load_inline(name="kb_pch_probe", cpp_sources=[_cpp], functions=["kb_twice"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.kb_twice(x)
'''

_DONE: set[str] = set()  # headers' folders warmed by this process (a Ray worker's)
_GUARD = threading.Lock()


def warm_once(builder) -> None:
    """`warm`, once per headers' folder in this process."""
    with _GUARD:
        if not builder.pch_dir or builder.pch_dir in _DONE:
            return
        _DONE.add(builder.pch_dir)
    warm(builder)


def warm(builder) -> None:
    """Make or check the builder's header (in the calling thread: a build worker's)."""
    from kb_eval.eval.schedule.build import build_probe
    from kb_eval.isolation.procs import Stopped

    folder = Path(builder.root) / "_pch_probe"
    try:
        ninja = next(folder.rglob("build.ninja"), None)
        if ninja is None:
            build_probe(builder, PROBE, folder)
        else:
            slim = builder.env.get(pch.SLIM_VAR) != "0"  # else torch's header's tier
            pch.ensure_pch(builder.env.get("KB_PCH_CXX", "c++"), Path(builder.pch_dir),
                           probe_flags(ninja), slim=slim)
    except Stopped:
        return  # the run stops: its builds go on without the header, as they would anyway
    except OSError:
        return  # any trouble: builds compile without it, never worse


def probe_flags(ninja: Path) -> list[str]:
    """The flags torch gave the probe's main.cpp (from its build.ninja), as the front
    takes them apart."""
    text = ninja.read_text()
    var = {m[1]: m[2] for m in re.finditer(r"^(\w+) = (.*)$", text, re.M)}
    main = ninja.parent / "main.cpp"
    args = [*shlex.split(var["cflags"]), "-c", str(main), "-o", "main.o",
            *shlex.split(var.get("post_cflags", ""))]
    found = pch.split(args)
    if found is None:
        raise OSError("the probe's compile is not one the front would take")
    return found[0]
