"""A CUDA compiler front for build children: a .cu against a lean torch/extension.h first.

nvcc reads torch/extension.h three times per compile and has no precompiled headers, so
a .cu is compiled against smaller headers first: "lean" (the Tensor class, AT_DISPATCH,
at:: factories as torch::; skipped for sources saying `requires_grad`), then "slim"
(torch/types.h), then the real header, whose result and diagnostics stand if all fail.
What a larger header adds has its own names, so a smaller tier fails rather than meaning
something else. `<object>.kb-header` records the tier (BuildInfo.cuda_header);
`KB_PCH_BYPASS` goes to the real nvcc. Imports nothing of kb_eval.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

_TAG = "// kb_eval's {} header (kb_eval/eval/schedule/nvcc_front.py)\n"
# Each ATen/ops/<op>.h declares every overload of its op (at::op, at::op_out...).
LEAN_INCLUDES = ("ATen/core/Tensor.h", "ATen/Dispatch.h", *(
    f"ATen/ops/{op}.h" for op in ("empty", "empty_like", "empty_strided", "zeros",
                                  "zeros_like", "ones", "ones_like", "full", "full_like")))
LEAN_DTYPES = {"kFloat16": "kHalf", "kFloat32": "kFloat", "kFloat64": "kDouble",
               "kInt8": "kChar", "kInt16": "kShort", "kInt32": "kInt", "kInt64": "kLong",
               "kUInt8": "kByte"}
LEAN = ("#pragma once\n" + _TAG.format("lean")
        + "".join(f"#include <{h}>\n" for h in LEAN_INCLUDES)
        + "namespace torch {\nusing namespace at;  // torch::Tensor, torch::empty_like...\n"
        + "using Dtype = at::ScalarType;\n"
        + "".join(f"constexpr auto {a} = at::{b};\n" for a, b in LEAN_DTYPES.items())
        + "}  // namespace torch\n")
SLIM = "#pragma once\n" + _TAG.format("slim") + "#include <torch/types.h>\n"
# What each tier puts in place of which headers, tried in this order, then the real ones
# (load_inline starts every CUDA source with `#include <torch/types.h>`).
TIERS = {"lean": {h: LEAN for h in ("torch/extension.h", "torch/torch.h", "torch/types.h")},
         "slim": {h: SLIM for h in ("torch/extension.h", "torch/torch.h")}}
# A tier is skipped for a source containing its word: the lean tier's factories refuse
# options with requires_grad set, which torch's accept.
SKIP_IF_SOURCE_SAYS = {"lean": "requires_grad"}
MARKER_SUFFIX = ".kb-header"
BYPASS_VAR = "KB_PCH_BYPASS"  # pch.BYPASS_VAR (not imported: a script imports nothing of ours)
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def install(folder: Path, real_nvcc: str) -> dict[str, str]:
    """Write the front script and each tier's headers into `folder`; return the
    environment that selects them. Files are rewritten only when they differ (a new date
    would make ninja rebuild every cached build)."""
    from kb_eval.eval.schedule.pch import front_script, write_if_changed  # the parent's

    script = folder / "bin" / "kb-nvcc"
    write_if_changed(script, front_script(__file__), mode=0o755)
    for tier, headers in TIERS.items():
        for header, text in headers.items():
            write_if_changed(folder / tier / header, text)
    return {"PYTORCH_NVCC": str(script), "KB_NVCC_REAL": real_nvcc,
            "KB_NVCC_TIERS": str(folder)}


def real_nvcc() -> str | None:
    """The nvcc command torch's cpp_extension would run (a user's PYTORCH_NVCC, else
    CUDA_HOME's), or None. Parent only: it imports torch."""
    given = os.environ.get("PYTORCH_NVCC")
    if given and Path(shlex.split(given)[0]).name == "kb-nvcc":
        return os.environ.get("KB_NVCC_REAL")  # a run inside one of ours: not the front twice
    if given:
        return given
    import shutil

    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else None
    return nvcc if nvcc and shutil.which(nvcc) else None


def cuda_compile(args: list[str]) -> tuple[str, str] | None:
    """(source, object) of a compile of one .cu file, else None."""
    if "-c" not in args or "-o" not in args[:-1]:
        return None
    sources = [a for a in args if a.endswith(".cu") and not a.startswith("-")]
    return (sources[0], args[args.index("-o") + 1]) if len(sources) == 1 else None


def tiers_for(source: str) -> list[str]:
    """The tiers worth trying for a source, in order: each stands in for a header the
    source includes, and the source does not say its skip word (an unreadable one: none)."""
    try:
        text = Path(source).read_text(errors="replace")
    except OSError:
        return []
    names = set(_INCLUDE.findall(text))
    return [tier for tier, headers in TIERS.items() if names & headers.keys()
            and SKIP_IF_SOURCE_SAYS.get(tier, "\0") not in text]


def main(argv: list[str]) -> int:
    real = shlex.split(os.environ.get("KB_NVCC_REAL", "nvcc"))
    args, tiers = argv[1:], os.environ.get("KB_NVCC_TIERS")
    found = cuda_compile(args)
    if found is None:
        os.execvp(real[0], [*real, *args])
    source, out = found
    for tier in tiers_for(source) if tiers and not os.environ.get(BYPASS_VAR) else []:
        tried = subprocess.run([*real, "-I", os.path.join(tiers, tier), *args],
                               capture_output=True)
        if tried.returncode == 0:
            sys.stdout.buffer.write(tried.stdout)
            sys.stderr.buffer.write(tried.stderr)
            _mark(out, tier)
            return 0
    done = subprocess.run([*real, *args])  # its diagnostics go straight through
    if done.returncode == 0:
        _mark(out, "full")
    return done.returncode


def _mark(out: str, header: str) -> None:
    try:
        Path(out + MARKER_SUFFIX).write_text(header)
    except OSError:
        pass  # a report, never a reason to fail the compile


if __name__ == "__main__":
    sys.exit(main(sys.argv))
