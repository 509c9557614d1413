"""A C++ compiler front for build children: precompiles torch/extension.h once.

For a compile of one source starting with `#include <torch/extension.h>`, it puts first
on the include path `<KB_PCH_DIR>/<key>/`, a precompiled header made with the same flags,
compiler and headers; GCC checks its validity, so a PCH is faster, never different. A
PCH folder is used only when complete (`complete.json`, written last; made aside and
renamed). Two tiers as in nvcc_front.py: a slim header (SLIM) first, then torch's, whose
result is the compile's (`KB_PCH_SLIM=0` skips the slim one). Anything else, or
`KB_PCH_BYPASS`, goes to the real compiler (`KB_PCH_CXX`); PCH trouble means compiling
without it. Imports nothing of kb_eval: each compile pays only a bare Python start.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HEADER = "torch/extension.h"
GCH = HEADER + ".gch"
# The slim tier's torch/extension.h: the tensor API and the bindings load_inline's module
# code needs, without torch/all.h (nn, optim, ...) and torch/python.h.
SLIM = ("#pragma once\n// kb_eval's slim header (kb_eval/eval/schedule/pch.py)\n"
        "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
        "#include <torch/csrc/Exceptions.h>\n")
SLIM_FOLDER = "slim"  # <KB_PCH_DIR>/slim/torch/extension.h
COMPLETE = "complete.json"
BYPASS_VAR = "KB_PCH_BYPASS"
SLIM_VAR = "KB_PCH_SLIM"  # "0": torch's header only (to measure what the slim tier saves)
SOURCES = (".cpp", ".cc", ".cxx")
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP = {"-c", "-MMD", "-MD"}


def install(folder: Path, real_cxx: str) -> dict[str, str]:
    """Write the front script into `folder` and return the environment that selects it.
    Its name contains `g++`, which is how torch accepts a compiler it has not seen."""
    script = folder / "bin" / "kb-pch-g++"
    write_if_changed(script, front_script(__file__, direct_var="KB_PCH_CXX"), mode=0o755)
    write_if_changed(folder / SLIM_FOLDER / HEADER, SLIM)
    return {"CXX": str(script), "KB_PCH_CXX": real_cxx, "KB_PCH_DIR": str(folder)}


# Version queries (load_inline asks in every run child) skip the Python start.
VERSION_QUERIES = ("-dumpfullversion -dumpversion", "-dumpversion", "-dumpfullversion",
                   "--version", "-v")


def front_script(module_file: str, direct_var: str | None = None) -> str:
    """A shell script that runs `module_file` as a script with this Python; with
    `direct_var`, a version query goes straight to the compiler that variable names."""
    direct = ""
    if direct_var:
        cases = "|".join(f'"{q}"' for q in VERSION_QUERIES)
        direct = f'case "$*" in {cases}) exec "${{{direct_var}:-c++}}" "$@" ;; esac\n'
    return f'#!/bin/sh\n{direct}exec "{sys.executable}" "{Path(module_file).resolve()}" "$@"\n'


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` whole (a temporary file renamed into place) unless it holds `text`
    already: an unchanged file keeps its date, which ninja compares."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


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


def pch_key(real: str, flags: list[str], header: Path, text: str = "") -> str:
    """Key of flags, compiler binary, torch's headers' sizes and dates (GCC does not
    check them) and `text`, our own header's content."""
    compiler = shutil.which(real) or real
    parts = [os.path.realpath(compiler), *flags, *([text] if text else [])]
    for path in (Path(compiler), header, header.parent / "version.h"):
        try:
            st = os.stat(os.path.realpath(path))
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:none")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


# ------------------------------------------------------------------ a PCH folder
def is_complete(folder: Path) -> bool:
    """All three parts there, the .gch and the header as long as the marker says."""
    try:
        marker = json.loads((folder / COMPLETE).read_text())
        return ((folder / GCH).stat().st_size == marker["gch_size"] > 0
                and (folder / HEADER).stat().st_size == marker["header_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure_pch(real: str, root: Path, flags: list[str], slim: bool = False) -> Path | None:
    """The folder to put first on the include path, or None (no PCH, or being made).
    `slim`: of our slim header (SLIM), else of torch's."""
    header = header_path(flags)
    if header is None:
        return None
    key = pch_key(real, flags, header, SLIM if slim else "")
    if slim:
        header = root / SLIM_FOLDER / HEADER
    folder = root / key
    if is_complete(folder):
        return folder
    if (root / f"{key}.failed").exists():
        return None
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another compile is making it: go on without, do not wait
        if is_complete(folder):  # made while we looked
            return folder
        return _make(real, root, key, flags, header)


def _make(real: str, root: Path, key: str, flags: list[str], header: Path) -> Path | None:
    """Under the key's lock: make the folder aside, then rename it into place whole."""
    _remove_leftovers(root, key)
    tmp = root / f"{key}.tmp.{os.getpid()}"
    (tmp / HEADER).parent.mkdir(parents=True)
    shutil.copy2(header, tmp / HEADER)  # same bytes and date: GCC's #pragma once matches
    done = subprocess.run([real, "-x", "c++-header", *flags, str(header), "-o", str(tmp / GCH)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        if done.returncode > 0:  # the compiler said no (a signal is not its verdict)
            (root / f"{key}.failed").write_text(done.stderr[-4000:])
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    marker = {"gch_size": (tmp / GCH).stat().st_size,
              "header_size": (tmp / HEADER).stat().st_size}
    (tmp / COMPLETE).write_text(json.dumps(marker))
    os.rename(tmp, root / key)
    return root / key


def _remove_leftovers(root: Path, key: str) -> None:
    """Temporary folders of makers that were killed, and a folder that is not complete
    (nobody uses one, so it can go; only the lock holder gets here)."""
    for tmp in root.glob(f"{key}.tmp.*"):
        shutil.rmtree(tmp, ignore_errors=True)
    folder = root / key
    if folder.exists() or folder.is_symlink():
        trash = root / f"{key}.trash.{os.getpid()}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)


def activity_since(root: Path, since: float) -> bool:
    """Whether a PCH was being made or finished at or after `since` (time.time()), so a
    build that timed out meanwhile is not blamed. A temporary folder counts if made since
    then or if its maker still runs."""
    since -= 1.0  # file times come from a coarser clock than time.time()
    try:
        for tmp in root.glob("*.tmp.*"):
            if tmp.stat().st_mtime >= since or _alive(tmp.name.rpartition(".")[2]):
                return True
        return any(m.stat().st_mtime >= since for m in root.glob(f"*/{COMPLETE}"))
    except OSError:
        return False


def _alive(pid: str) -> bool:
    """A running process (a zombie, killed but not yet reaped, is not)."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # exists, another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill() said it exists
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


# ------------------------------------------------------------------ the front
def include_folder(real: str, found: tuple[list[str], str] | None,
                   slim: bool = False) -> Path | None:
    """The PCH folder for a compile that `split` took apart as `found` (None: not one of
    ours), or None; never raises: trouble with the PCH means compiling without it.
    `slim`: the slim tier's folder (its PCH's, or while there is none the header's own)."""
    root = os.environ.get("KB_PCH_DIR")
    if not root or os.environ.get(BYPASS_VAR) or found is None:
        return None
    if slim and os.environ.get(SLIM_VAR) == "0":
        return None
    try:
        made = ensure_pch(real, Path(root), found[0], slim)
        return made or (Path(root) / SLIM_FOLDER if slim else None)
    except Exception:  # noqa: BLE001 - any PCH trouble: compile without it
        return None


def main(argv: list[str]) -> int:
    real = os.environ.get("KB_PCH_CXX", "c++")
    args = argv[1:]
    try:
        found = split(args)  # once for both tiers (it reads the source's first line)
    except Exception:  # noqa: BLE001 - any trouble: not a compile of ours
        found = None
    slim = include_folder(real, found, slim=True)
    if slim is not None:  # the slim tier first; its failure, for any reason, is not shown
        tried = subprocess.run([real, "-I", str(slim), *args], capture_output=True)
        if tried.returncode == 0:
            sys.stdout.buffer.write(tried.stdout)
            sys.stderr.buffer.write(tried.stderr)
            return 0
    folder = include_folder(real, found)
    if folder is not None:
        args = ["-I", str(folder), *args]
    os.execvp(real, [real, *args])
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
