"""Build step: compile a candidate in its own child, once per distinct source.

Each source gets a cache folder `<cache>/builds/<sha256(source + toolchain)>/`, where the
toolchain is torch's version, CUDA's and nvcc's, the C++ compiler's and the arch list.
The build child points TORCH_EXTENSIONS_DIR (and TRITON_CACHE_DIR) there and execs the
source, so `load_inline` compiles into it; the run child later does the same, finds the
built .so up to date and loads it without invoking a compiler. After a build, the parent
writes `kb_build.json` into the folder; its presence is the cache hit, and a cached
compile error is served from it too (timeouts and crashes are not cached: they may pass
next time).

Builds run with no GPU visible (CUDA_VISIBLE_DEVICES=""), so they run on CPU workers while
GPUs evaluate. An exception at import that is not a build error (say the module asks for
the GPU at import) makes the build "deferred": the run child, which sees the GPU, decides.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kb_eval.eval.judge.crashes import crash_info, status_of
from kb_eval.isolation import BUILD_POLL_S, ChildOutcome, run_isolated
from kb_eval.results import BuildInfo, CrashInfo, write_json_atomic

MARKER = "kb_build.json"
_COMPILE_ERROR = re.compile(r"error|undefined reference|undefined symbol|fatal", re.IGNORECASE)


# ------------------------------------------------------------------ cache key
def _first_line(cmd: list[str]) -> str:
    exe = shutil.which(cmd[0])
    if exe is None:
        return f"{cmd[0]}: none"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{cmd[0]}: unknown"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if cmd[0] == "nvcc" and lines else (lines[0] if lines else "")


@functools.lru_cache(maxsize=8)
def toolchain_fingerprint(arch_list: str = "", cxx: str | None = None, front: str = "") -> str:
    """What, besides the source, decides the bytes of a build (and its ninja commands:
    `front` names the compiler front, see pch.py, that children see as CXX)."""
    import torch

    cxx = cxx or os.environ.get("CXX", "c++")
    return json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                       "nvcc": _first_line(["nvcc", "--version"]),
                       "cxx": _first_line([cxx, "--version"]), "arch": arch_list,
                       "python": sys.version.split()[0], "front": front}, sort_keys=True)


@functools.lru_cache(maxsize=4)
def is_gcc(cxx: str) -> bool:
    """Precompiled headers found by name next to includes are GCC's feature (clang
    defines __GNUC__ too, so it is told apart by __clang__)."""
    try:
        macros = subprocess.run([cxx, "-dM", "-E", "-x", "c++", os.devnull], capture_output=True,
                                text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "__GNUC__" in macros and "__clang__" not in macros


def cache_key(source: str, fingerprint: str) -> str:
    return hashlib.sha256((source + "\0" + fingerprint).encode()).hexdigest()


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def trim_compiler_output(text: str, max_lines: int = 60, context: int = 2) -> str:
    """The useful part of a compiler log: error lines with a little context, else the tail."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    hits = [i for i, ln in enumerate(lines) if _COMPILE_ERROR.search(ln)
            and not ln.lstrip().startswith(("[", "/usr/", "c++ ", "nvcc "))]
    if not hits:
        return "\n".join(lines[-max_lines:])
    keep: list[int] = []
    for i in hits:
        keep.extend(j for j in range(max(0, i - context), min(len(lines), i + context + 1))
                    if j not in keep)
        if len(keep) >= max_lines:
            break
    return "\n".join(lines[j][:400] for j in sorted(keep)[:max_lines])


# ------------------------------------------------------------------ child side
def _is_build_error(e: BaseException) -> bool:
    text = str(e)
    return (isinstance(e, subprocess.CalledProcessError)
            or "Error building extension" in text
            or (isinstance(e, ImportError) and ".so" in text))


def build_candidate(payload: dict, workdir: Path) -> dict:
    """Exec the source with the build cache as extensions folder (compiles load_inline)."""
    from kb_eval.eval.child.worker import use_build_dirs
    from kb_eval.problems import load_module

    use_build_dirs(payload)
    t0 = time.monotonic()
    try:
        module = load_module(payload["source"], "kb_candidate")
    except SyntaxError as e:
        return {"status": "compile_error", "error": f"SyntaxError: {e.msg} (line {e.lineno})",
                "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - the candidate's failure, reported
        text = f"{type(e).__name__}: {e}"
        if _is_build_error(e):
            return {"status": "compile_error", "error": text.splitlines()[0][:300],
                    "detail": trim_compiler_output(text), "seconds": time.monotonic() - t0}
        return {"status": "deferred", "error": text.splitlines()[0][:300],
                "seconds": time.monotonic() - t0}
    if not isinstance(getattr(module, "ModelNew", None), type):
        return {"status": "compile_error", "error": "the source defines no class ModelNew",
                "seconds": time.monotonic() - t0}
    return {"status": "ok", "seconds": time.monotonic() - t0}


# ------------------------------------------------------------------ parent side
@dataclass
class BuildOutcome:
    info: BuildInfo
    extensions_dir: str
    error: str | None = None
    detail: str | None = None
    crash: CrashInfo | None = None

    @property
    def usable(self) -> bool:
        """Worth running: built, nothing to build, or deferred to the run child."""
        return self.info.status in ("ok", "skipped", "deferred")


# A source that mentions none of these compiles nothing when imported (pure PyTorch, or
# Triton, which compiles on first call): its build step is skipped and the run child loads it.
COMPILE_MARKERS = ("cpp_extension", "load_inline", "nvcc", "subprocess", "ctypes", "cffi",
                   "setuptools", "cupy", "numba", "os.system", "importlib", "__import__")


def needs_build(source: str) -> bool:
    return any(m in source for m in COMPILE_MARKERS)


def quick_check(source: str) -> str | None:
    """Static: it parses and names ModelNew somewhere (no child needed to say no)."""
    try:
        ast.parse(source)
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    return None if "ModelNew" in source else "the source defines no class ModelNew"


class Builder:
    """Builds sources in isolated children (thread-safe; one build per key at a time)."""

    def __init__(self, root: Path, fingerprint: str, env: dict,
                 timeout_s: float, mem_limit_mb: int | None):
        self.root = Path(root)
        self.fingerprint, self.env = fingerprint, env
        self.timeout_s, self.mem_limit_mb = timeout_s, mem_limit_mb
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def build(self, source: str, workdir: Path) -> BuildOutcome:
        key = cache_key(source, self.fingerprint)
        ext_dir = self.root / key
        with self._lock(key):
            cached = self._cached(key, ext_dir)
            if cached is not None:
                return cached
            problem = quick_check(source)
            if problem is not None:
                return BuildOutcome(BuildInfo(cache_key=key, status="compile_error"),
                                    str(ext_dir), error=problem)
            if not needs_build(source):
                return BuildOutcome(BuildInfo(cache_key=key, status="skipped"), str(ext_dir))
            ext_dir.mkdir(parents=True, exist_ok=True)
            out = run_isolated("kb_eval.eval.schedule.build:build_candidate",
                               {"source": source, "extensions_dir": str(ext_dir)},
                               workdir=workdir, timeout_s=self.timeout_s,
                               mem_limit_mb=self.mem_limit_mb, env=self.env, prewarm=True,
                               poll_s=BUILD_POLL_S)
            return self._record(key, ext_dir, out)

    def _cached(self, key: str, ext_dir: Path) -> BuildOutcome | None:
        try:
            data = json.loads((ext_dir / MARKER).read_text())
        except (OSError, ValueError):
            return None
        info = BuildInfo(cache_key=key, cache_hit=True, status=data["status"], seconds=0.0)
        return BuildOutcome(info, str(ext_dir), error=data.get("error"), detail=data.get("detail"))

    def _record(self, key: str, ext_dir: Path, out: ChildOutcome) -> BuildOutcome:
        if out.ok:
            r = out.result or {}
            info = BuildInfo(cache_key=key, status=r.get("status", "ok"),
                             seconds=round(out.wall_s, 3))
            if info.status in ("ok", "compile_error"):
                write_json_atomic(ext_dir / MARKER, {**r, "built_s": out.wall_s})
            return BuildOutcome(info, str(ext_dir), error=r.get("error"), detail=r.get("detail"))
        crash = crash_info("build", out)
        info = BuildInfo(cache_key=key, status=status_of(crash), seconds=round(out.wall_s, 3))
        return BuildOutcome(info, str(ext_dir), error=f"build {out.describe()}",
                            detail=out.output_tail[-4000:], crash=crash)


# ------------------------------------------------------------------ crash kinds
