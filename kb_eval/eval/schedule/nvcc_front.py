"""A CUDA compiler front for build children: a .cu against a slim torch/extension.h first.

`load_inline` compiles a candidate's CUDA source with nvcc, and nearly every candidate
starts it with `#include <torch/extension.h>`: torch's whole C++ frontend (torch/all.h:
nn, optim, data, serialization) and its Python bindings (pybind11, Python.h). nvcc reads
all of that three times (cudafe++ for the host side, cicc for the device side, then GCC
compiles the host side), and it has no precompiled headers. Kernels and their launchers
use the tensor API, which `torch/types.h` holds (load_inline puts that include first in
every CUDA source anyway). A typical candidate's file took 26.4 s instead of 52.7 s on the
H100 machine (`benchmarks/compile_cost.py`), 30.6 s instead of 68.0 s on this project's
2-core CPU (nvcc run by hand: no CUDA torch there).

So this front compiles a .cu that includes torch/extension.h or torch/torch.h with a
folder first on the include path where both are `#include <torch/types.h>`. If that
compile fails, for whatever reason, it runs the real compile and returns its result and
its diagnostics, never the slim one's: a source that needs the full header (pybind11 in
the .cu, torch::nn) is compiled with it, at the cost of the failed try. What the full
header adds lives in its own names (torch::nn, torch::optim, torch::fft, py::, ...), not
overloads of the tensor API's, so a source that compiles both ways means the same both
ways. Next to the object it writes `<object>.kb-header` ("slim" or "full"), which the
build reports (BuildInfo.cuda_header). Everything else goes to the real nvcc
unchanged, and so does every compile when `KB_PCH_BYPASS` is set (the builder's retry
after a failure it blames on us). Run as a script: it imports nothing of kb_eval.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

SLIM = "#pragma once\n// kb_eval's slim header (kb_eval/eval/schedule/nvcc_front.py)\n" \
       "#include <torch/types.h>\n"
SHIMMED = ("torch/extension.h", "torch/torch.h")
MARKER_SUFFIX = ".kb-header"
BYPASS_VAR = "KB_PCH_BYPASS"  # pch.BYPASS_VAR (not imported: a script imports nothing of ours)
_INCLUDES = re.compile(r'^\s*#\s*include\s*[<"]torch/(extension|torch)\.h[>"]', re.MULTILINE)


def install(folder: Path, real_nvcc: str) -> dict[str, str]:
    """Write the front script and the slim headers into `folder`; return the environment
    that selects them (torch's cpp_extension runs `PYTORCH_NVCC` for CUDA files). Files
    are rewritten only when they differ: a slim header's new date would make ninja
    compile every cached build again when the run child loads it."""
    from kb_eval.eval.schedule.pch import front_script, write_if_changed  # the parent's

    script = folder / "bin" / "kb-nvcc"
    write_if_changed(script, front_script(__file__), mode=0o755)
    for header in SHIMMED:
        write_if_changed(folder / "slim" / header, SLIM)
    return {"PYTORCH_NVCC": str(script), "KB_NVCC_REAL": real_nvcc,
            "KB_NVCC_SLIM": str(folder / "slim")}


def real_nvcc() -> str | None:
    """The nvcc command torch's cpp_extension would run (a user's PYTORCH_NVCC, e.g. with
    ccache, else CUDA_HOME's), or None when there is none. In the parent only: it
    imports torch."""
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


def includes_full_header(source: str) -> bool:
    try:
        return bool(_INCLUDES.search(Path(source).read_text(errors="replace")))
    except OSError:
        return False


def main(argv: list[str]) -> int:
    real = shlex.split(os.environ.get("KB_NVCC_REAL", "nvcc"))
    args, slim = argv[1:], os.environ.get("KB_NVCC_SLIM")
    found = cuda_compile(args)
    if found is None:
        os.execvp(real[0], [*real, *args])
    source, out = found
    if slim and not os.environ.get(BYPASS_VAR) and includes_full_header(source):
        tried = subprocess.run([*real, "-I", slim, *args], capture_output=True)
        if tried.returncode == 0:
            sys.stdout.buffer.write(tried.stdout)
            sys.stderr.buffer.write(tried.stderr)
            _mark(out, "slim")
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
