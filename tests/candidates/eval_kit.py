"""Shared by the eval tests: the test problems and candidates, a compiler wrapper that logs
every invocation (so a test can assert that a cache hit compiled nothing), and helpers.
The build cache is conftest's `build_cache_dir` (one for the session, so each distinct
C++/CUDA source compiles once)."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBLEMS = HERE / "problems"  # KernelBench layout: level1/<id>_<Name>.py
CPP = HERE / "cpp"  # level1_problem<ID>_sample<S>.py
GPU = HERE / "gpu"
VANDAL = HERE / "vandal"  # candidates that attack the evaluator's files

_session: dict[str, Path] = {}


def session_dir() -> Path:
    """One folder per test process: compiler wrapper + its log (removed at exit)."""
    if "root" not in _session:
        root = Path(tempfile.mkdtemp(prefix="kb_eval_tests_"))
        atexit.register(shutil.rmtree, root, True)
        _session["root"] = root
    return _session["root"]


def compiler_log() -> Path:
    return session_dir() / "compiler.log"


def wrapper_path() -> str:
    """PATH with a `c++` (and `nvcc` when present) that logs its arguments, then runs the
    real one: a cache hit must leave no compile or link line in the log."""
    bindir = session_dir() / "bin"
    if not bindir.exists():
        bindir.mkdir()
        for tool in ("c++", "nvcc"):
            real = shutil.which(tool)
            if real is None:
                continue
            script = bindir / tool
            script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{compiler_log()}"\n'
                              f'exec "{real}" "$@"\n')
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def compile_lines() -> list[str]:
    """Logged compiler calls that compile or link (not version probes)."""
    try:
        lines = compiler_log().read_text().splitlines()
    except FileNotFoundError:
        return []
    return [ln for ln in lines if " -c " in f" {ln} " or " -shared" in ln or " -o " in ln]


def child_env() -> dict[str, str]:
    """Environment for `python -m kb_eval.eval` subprocesses in tests."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PATH": wrapper_path(), "PYTHONPATH": path}


def tuned_config(folder: Path, **defaults) -> dict[str, str]:
    """The environment of a command whose config's DEFAULTS set these (cache_dir, warmup,
    correct_trials, run_timeout_s, lane_depth, ...: they have no flags): a config.py
    written in `folder`, named by KB_EVAL_CONFIG."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.py"
    values = {k: str(v) if isinstance(v, Path) else v for k, v in defaults.items()}
    path.write_text(f"MODELS = []\nDEFAULTS = {values!r}\n")
    return {"KB_EVAL_CONFIG": str(path)}


def cli(*args: str, timeout: float = 900, env: dict | None = None):
    import subprocess

    return subprocess.run([sys.executable, "-m", "kb_eval.eval", *args], cwd=REPO,
                          env={**child_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def source_of(path: Path) -> str:
    return Path(path).read_text()
