"""The build child's side: `build_candidate` execs the source so `load_inline` compiles
into the build cache; `call_on_meta` runs a lazy compile ahead. Candidate code runs here:
it imports nothing of the scheduler or the judge (parent side: schedule/build.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from kb_eval.eval.child.baton import use_build_dirs
from kb_eval.eval.child.first_call_task import call_on_meta

__all__ = ["build_candidate", "call_on_meta", "compile_error_line", "cuda_header",
           "is_diagnosed", "toolchain_fault", "trim_compiler_output"]

# nvcc_front.py's MARKER_SUFFIX and tiers: not imported (no scheduler module here)
HEADER_MARKER = ".kb-header"
HEADER_TIERS = ("lean", "slim", "full")
_COMPILE_ERROR = re.compile(r"error|undefined reference|undefined symbol|fatal", re.IGNORECASE)
# a compiler's diagnostic (case-sensitive: Python's "RuntimeError:" must not count)
_DIAGNOSTIC = re.compile(r"\berror:|\berror :|undefined reference|undefined symbol|"
                         r"multiple definition")
# Failures that are ours whatever the source: (pattern, what went wrong).
_OUR_FAULTS = (
    (r"precompiled header|PCH file", "the precompiled header could not be read"),
    (r"/pch/[0-9a-f]{24}/torch/", "a file of the precompiled header is missing"),
    (r"signal terminated program", "the compiler was killed"),
    (r"internal compiler error", "the compiler crashed"),
    (r"build stopped: interrupted", "the build was interrupted"),
    (r"ninja: error: loading", "a build file of ours is missing"),
    (r"eval/schedule/(pch|nvcc_front)\.py", "the compiler front failed"),
)


# ------------------------------------------------------------------ compiler output
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


def compile_error_line(text: str) -> str:
    """The compiler's first diagnostic, its path cut to the file name, else the first line."""
    for line in text.splitlines():
        if _DIAGNOSTIC.search(line) and not line.lstrip().startswith(("[", "FAILED")):
            return re.sub(r"^\s*\S*/(?=[^/\s]+:\d+)", "", line).strip()[:300]
    return text.splitlines()[0][:300]


def toolchain_fault(text: str, our_dirs: list[str]) -> str | None:
    """Why a failed build is our fault, with the line that shows it, or None. `our_dirs`:
    folders only we write, where a missing file is ours."""
    checks = list(_OUR_FAULTS)
    for folder in filter(None, our_dirs):
        path = re.escape(folder.rstrip("/")) + r"/\S*"
        checks.append((rf"error: {path}|{path}: (No such file or directory|not found|"
                       rf"Permission denied)", "a file of ours is missing"))
    for pattern, why in checks:
        found = re.search(pattern, text)
        if found:
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.end())
            return f"{why}: {text[start:end if end >= 0 else None].strip()[:300]}"
    return None


def is_diagnosed(text: str) -> bool:
    """The compiler or linker said what is wrong with the source."""
    return bool(_DIAGNOSTIC.search(text))


# ------------------------------------------------------------------ the build
def _is_build_error(e: BaseException) -> bool:
    text = str(e)
    return (isinstance(e, subprocess.CalledProcessError)
            or "Error building extension" in text
            or (isinstance(e, ImportError) and ".so" in text))


def build_candidate(payload: dict, workdir: Path) -> dict:
    """Exec the source with the build cache as extensions folder (compiles load_inline)."""
    from kb_eval.problems import load_module

    use_build_dirs(payload.get("extensions_dir"))
    t0 = time.monotonic()
    try:
        module = load_module(payload["source"], "kb_candidate")
    except SyntaxError as e:
        return {"status": "compile_error", "error": f"SyntaxError: {e.msg} (line {e.lineno})",
                "seconds": time.monotonic() - t0}
    except Exception as e:  # noqa: BLE001 - the candidate's failure, reported
        text = f"{type(e).__name__}: {e}"
        if _is_build_error(e):
            ours = [os.environ.get("KB_PCH_DIR", ""),
                    str(Path(payload["extensions_dir"]).parent)]
            return {"status": "compile_error", "error": compile_error_line(text),
                    "detail": trim_compiler_output(text), "seconds": time.monotonic() - t0,
                    "toolchain_fault": toolchain_fault(text, ours),
                    "diagnosed": is_diagnosed(text)}
        return {"status": "deferred", "error": text.splitlines()[0][:300],
                "seconds": time.monotonic() - t0}
    if not isinstance(getattr(module, "ModelNew", None), type):
        return {"status": "compile_error", "error": "the source defines no class ModelNew",
                "seconds": time.monotonic() - t0}
    return {"status": "ok", "seconds": time.monotonic() - t0,
            "cuda_header": cuda_header(Path(payload["extensions_dir"]))}


def cuda_header(extensions_dir: Path) -> str | None:
    """Which torch/extension.h tiers the CUDA files were compiled with ("lean+full"), or None."""
    kinds = {p.read_text().strip() for p in extensions_dir.rglob("*" + HEADER_MARKER)}
    order = list(HEADER_TIERS)
    rank = {k: order.index(k) if k in order else len(order) for k in kinds}
    return "+".join(sorted(kinds, key=rank.get)) or None
