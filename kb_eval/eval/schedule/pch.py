"""A C++ compiler front for build children: precompiles torch/extension.h once.

Every load_inline extension compiles a `main.cpp` that starts with
`#include <torch/extension.h>`: parsing that header is most of its ~25 s (2/3 of it
measured on this project's CPU machine: 30.6 s plain, 10.1 s with a precompiled header).
Build children get CXX pointing at a script that runs this file. For such a compile it
looks for a precompiled header made with exactly the same flags (the compile's own
arguments minus the extension's name, its input and outputs, plus the compiler binary
and torch's headers), in `<KB_PCH_DIR>/<key>/torch/extension.h.gch`, and puts that folder
first on the include path. GCC itself decides whether the header is valid for the compile
and otherwise reads the real headers, so a PCH can make a build faster, never different.

The first compile that finds none makes it (under a file lock, ~45 s) and others go on
without it meanwhile. Anything else (linking, `-E`, version queries, other sources) goes
straight to the real compiler (`KB_PCH_CXX`). Torch's own `use_pch` writes into torch's
install folder; this keeps everything inside our cache. Run as a script: it imports
nothing of kb_eval, so each compile pays only a bare Python start.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HEADER = "torch/extension.h"
SOURCES = (".cpp", ".cc", ".cxx")
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP = {"-c", "-MMD", "-MD"}


def install(folder: Path, real_cxx: str) -> dict[str, str]:
    """Write the front script into `folder` and return the environment that selects it.
    Its name contains `g++`, which is how torch accepts a compiler it has not seen."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "bin" / "kb-pch-g++"
    script.parent.mkdir(exist_ok=True)
    text = f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n'
    if not script.is_file() or script.read_text() != text:
        tmp = script.with_suffix(f".{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return {"CXX": str(script), "KB_PCH_CXX": real_cxx, "KB_PCH_DIR": str(folder)}


def split(args: list[str]) -> tuple[list[str], str] | None:
    """(the flags that decide a PCH's validity, the source) for a compile of one C++ file
    that starts by including torch/extension.h; None for anything else."""
    if "-c" not in args or "-x" in args or "-E" in args:
        return None
    flags, sources, skip = [], [], False
    for a in args:
        if skip:
            skip = False
        elif a in DROP_WITH_VALUE:
            skip = True
        elif a in DROP or a.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        elif not a.startswith("-") and a.endswith(SOURCES):
            sources.append(a)
        else:
            flags.append(a)
    if len(sources) != 1 or not _starts_with_header(sources[0]):
        return None
    return flags, sources[0]


def _starts_with_header(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
    except OSError:
        return False
    return first == f"#include <{HEADER}>"


def header_path(flags: list[str]) -> Path | None:
    """torch/extension.h as the compile would find it (first include folder holding it)."""
    for i, a in enumerate(flags):
        folder = (flags[i + 1] if a in ("-isystem", "-I") and i + 1 < len(flags)
                  else a[2:] if a.startswith("-I") and len(a) > 2 else None)
        if folder and (Path(folder) / HEADER).is_file():
            return Path(folder) / HEADER
    return None


def pch_key(real: str, flags: list[str], header: Path) -> str:
    """Flags, compiler binary and torch's headers: GCC does not check the headers' dates,
    so a reinstalled torch must give another key."""
    compiler = shutil.which(real) or real
    parts = [os.path.realpath(compiler), *flags]
    for path in (Path(compiler), header, header.parent / "version.h"):
        try:
            st = os.stat(os.path.realpath(path))
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:none")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def ensure_pch(real: str, root: Path, flags: list[str]) -> Path | None:
    """The folder to put first on the include path, or None (no PCH, or being made)."""
    header = header_path(flags)
    if header is None:
        return None
    folder = root / pch_key(real, flags, header)
    gch = folder / "torch" / "extension.h.gch"
    if gch.is_file():
        return folder
    if (folder / "failed").exists():
        return None
    gch.parent.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another compile is making it: do not wait for it
        if gch.is_file():
            return folder
        tmp = gch.with_name(f"extension.h.gch.{os.getpid()}")
        done = subprocess.run([real, "-x", "c++-header", *flags, str(header), "-o", str(tmp)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            (folder / "failed").write_text(done.stderr[-4000:])
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, gch)
    return folder


def main(argv: list[str]) -> int:
    real = os.environ.get("KB_PCH_CXX", "c++")
    args = argv[1:]
    root = os.environ.get("KB_PCH_DIR")
    found = split(args) if root else None
    if found is not None:
        try:
            folder = ensure_pch(real, Path(root), found[0])
        except OSError:
            folder = None
        if folder is not None:
            args = ["-I", str(folder), *args]
    os.execvp(real, [real, *args])
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
