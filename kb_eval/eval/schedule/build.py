"""Build step (parent side): compile a candidate in its own child, once per distinct source.

The build child (child/build_task.py) compiles into `<cache>/builds/<sha256(source +
toolchain)>/`, whose `kb_build.json` is the cache hit. Compile errors are cached only when
the compiler diagnosed the candidate's source; a failure of ours is retried once without
the precompiled header, then reported as `harness_error`. Builds see no GPU: an import
that needs one makes the build "deferred" to the run child.
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

from kb_eval.eval.child import baton
from kb_eval.eval.child.build_task import compile_error_line, toolchain_fault
from kb_eval.eval.judge.crashes import crash_info, status_of
from kb_eval.faults import armed_folder
from kb_eval.eval.schedule import pch, pch_warm
from kb_eval.eval.schedule.first_call import compiles_lazily
from kb_eval.isolation import BUILD_POLL_S, ChildOutcome, refusals, run_isolated
from kb_eval.results import BuildInfo, CrashInfo, write_json_atomic

MARKER = "kb_build.json"
HARNESS_ERROR = "harness_error"  # BuildInfo.status of a build that failed for a reason of ours
# Signals of an outside kill (the OOM killer, a user, a shutdown); our own kills say so.
KILL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")
# Both targets in one module, so that a lazy compile's child is one of the builds' spares.
BUILD_TARGET = "kb_eval.eval.child.build_task:build_candidate"
FIRST_CALL_TARGET = "kb_eval.eval.child.build_task:call_on_meta"


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


def clear_batons(root: Path, since: float | None = None,
                 before: float | None = None) -> int:
    """Remove torch's build locks under `root` made since `since` or before `before`;
    returns how many. A killed child's lock would time out every later load of that build;
    our own children's locks (child/baton.py) go only when their holder is dead."""
    def foreign(made: float) -> bool:
        return (since is not None and made >= since) or (before is not None and made < before)

    return sum(bool(baton.sweep(lock, foreign)) for lock in Path(root).glob("*/*/lock"))


def clear_old_batons(cache_dir: Path, build_timeout_s: float, run_timeout_s: float) -> float:
    """At a run's start, remove locks older than any build and run may hold; returns the
    start (wall clock) for the `since` sweep at its end."""
    started = time.time()
    clear_batons(Path(cache_dir) / "builds", before=started - build_timeout_s - run_timeout_s)
    return started


def front_name(compiler_env: dict[str, str]) -> str:
    """The compiler fronts build children see (CXX, PYTORCH_NVCC): part of the toolchain,
    since they are in the builds' ninja commands."""
    return "|".join(filter(None, (compiler_env.get("CXX"), compiler_env.get("PYTORCH_NVCC"))))


@functools.lru_cache(maxsize=8)
def toolchain_fingerprint(arch_list: str = "", cxx: str | None = None, front: str = "") -> str:
    """What, besides the source, decides the bytes of a build (`front`: front_name)."""
    import torch

    cxx = cxx or os.environ.get("CXX", "c++")
    return json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                       "nvcc": _first_line(["nvcc", "--version"]),
                       "cxx": _first_line([cxx, "--version"]), "arch": arch_list,
                       "python": sys.version.split()[0], "front": front}, sort_keys=True)


@functools.lru_cache(maxsize=4)
def is_gcc(cxx: str) -> bool:
    """Whether `cxx` is GCC (whose precompiled headers are found by name); clang defines
    __GNUC__ too, so it is told apart by __clang__."""
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


# ------------------------------------------------------------------ parent side
@dataclass
class BuildOutcome:
    info: BuildInfo
    extensions_dir: str  # the build's TORCH_EXTENSIONS_DIR, where the run child loads it
    error: str | None = None  # one line
    detail: str | None = None  # the compiler's output or the build child's output tail
    crash: CrashInfo | None = None
    # Why the build failed for a reason of ours, even after a retry without the PCH: the
    # sample is an eval_error, not a compile_error, and nothing is cached.
    harness_error: str | None = None
    # Why the build was retried without the precompiled header; None when built once.
    retried: str | None = None

    @property
    def usable(self) -> bool:
        """Worth running: built, nothing to build, or deferred to the run child."""
        return self.info.status in ("ok", "skipped", "deferred")


# A source naming none of these compiles nothing at import: its build step is skipped.
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
                 timeout_s: float, mem_limit_mb: int | None, spares: bool = True,
                 warm_pch: bool = True):
        self.root = Path(root)
        self.fingerprint, self.env = fingerprint, env
        self.timeout_s, self.mem_limit_mb = timeout_s, mem_limit_mb
        self.spares = spares  # children with torch imported ahead (little use to a Ray worker)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        # the first build worker makes the precompiled header (pch_warm.py); others don't wait
        self._warm = threading.Lock() if warm_pch and self.pch_dir else None

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    @property
    def pch_dir(self) -> str:
        """The compiler front's PCH folder ("" without the front)."""
        return self.env.get("KB_PCH_DIR", "")

    def build(self, source: str, workdir: Path, first_call: dict | None = None) -> BuildOutcome:
        """The source's build, from the cache or made now. `first_call` (problem_code,
        precision): also run a lazy compile ahead (first_call.py) after a fresh build."""
        key = cache_key(source, self.fingerprint)
        ext_dir = self.root / key
        if self._warm is not None and self._warm.acquire(blocking=False):
            pch_warm.warm(self)  # once: the lock is never released
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
            outcome = self._build_twice_at_most(source, key, ext_dir, workdir)
            if first_call and outcome.info.status == "ok" and compiles_lazily(source):
                outcome.info.first_call_s = self._first_call(source, first_call, ext_dir,
                                                             workdir)
            return outcome

    def _first_call(self, source: str, first_call: dict, ext_dir: Path,
                    workdir: Path) -> float:
        """Seconds of the lazy-compile call (first_call.py); its outcome is ignored. It
        gets a build's time limit: niced among builds, it may take longer than on the lane."""
        payload = {**first_call, "source": source, "extensions_dir": str(ext_dir)}
        out = run_isolated(FIRST_CALL_TARGET, payload,
                           workdir=workdir / "first_call", timeout_s=self.timeout_s,
                           mem_limit_mb=self.mem_limit_mb, env=self.env, prewarm=self.spares,
                           poll_s=BUILD_POLL_S, allow=self.allow(ext_dir))
        return round(out.wall_s, 3)

    def _build_twice_at_most(self, source: str, key: str, ext_dir: Path,
                             workdir: Path) -> BuildOutcome:
        """Build; on a failure of ours, once more without the PCH (the usual suspect)."""
        first = self._run(source, ext_dir, workdir, bypass_pch=False)
        if first.status == "crashed" and first.signal_name in KILL_SIGNALS:
            # Not retried: the kill may be ours, closing the run (a retry would hold it up).
            return self._harness_fault(key, ext_dir, first, f"the build was killed "
                                       f"({first.signal_name})")
        fault = self._fault_of_ours(first)
        if fault is None:
            return self._record(key, ext_dir, first)
        second = self._run(source, ext_dir, workdir, bypass_pch=True)
        second.wall_s += first.wall_s
        fault_again = self._fault_of_ours(second)
        if fault_again is None:
            outcome = self._record(key, ext_dir, second)
        else:
            outcome = self._harness_fault(key, ext_dir, second, fault_again)
        outcome.retried = fault
        return outcome

    def _run(self, source: str, ext_dir: Path, workdir: Path, bypass_pch: bool) -> ChildOutcome:
        env = {**self.env, pch.BYPASS_VAR: "1"} if bypass_pch else self.env
        started = time.time()
        out = run_isolated(BUILD_TARGET,
                           {"source": source, "extensions_dir": str(ext_dir)},
                           workdir=workdir, timeout_s=self.timeout_s,
                           mem_limit_mb=self.mem_limit_mb, env=env,
                           prewarm=self.spares and not bypass_pch,  # the usual env only
                           poll_s=BUILD_POLL_S, allow=self.allow(ext_dir))
        out.extra["started"] = started
        out.extra["refused"] = refusals.read(workdir)
        return out

    def allow(self, ext_dir: Path, *more_writes: str) -> dict[str, list[str]]:
        """What a build's sandboxed child may use: its build folder (write), the compiler
        fronts (read); never another build, nor the precompiled headers every later build
        uses."""
        fronts = [self.pch_dir, str(self.root.parent / "nvcc")]
        return {"write": [str(ext_dir), *more_writes, *armed_folder()],
                "read": [f for f in fronts if f]}

    def _fault_of_ours(self, out: ChildOutcome) -> str | None:
        """Why this build's failure is ours (None: it is the candidate's, or no failure)."""
        if out.status == "timeout":
            if self.pch_dir and pch.activity_since(Path(self.pch_dir), out.extra["started"]):
                return "the build timed out while a precompiled header was being made"
            return None
        r = out.result or {}
        if out.ok and r.get("status") == "compile_error":
            return r.get("toolchain_fault")
        return None

    def _cached(self, key: str, ext_dir: Path) -> BuildOutcome | None:
        try:
            data = json.loads((ext_dir / MARKER).read_text())
        except (OSError, ValueError):
            return None
        if data.get("status") == "compile_error" and not self._blames_candidate(data):
            (ext_dir / MARKER).unlink(missing_ok=True)  # an older version's, for a fault
            return None                                  # of ours: build again
        info = BuildInfo(cache_key=key, cache_hit=True, status=data["status"], seconds=0.0,
                         cuda_header=data.get("cuda_header"))
        error = data.get("error")
        if data["status"] == "compile_error" and data.get("detail") and \
                not re.match(r"\S+:\d+:\d+: ", error or ""):  # an older entry kept torch's
            error = compile_error_line(data["detail"])         # first line, not the compiler's
        return BuildOutcome(info, str(ext_dir), error=error, detail=data.get("detail"))

    def _blames_candidate(self, r: dict) -> bool:
        """A compile error the compiler gave for the candidate's source (the only failure
        worth caching); older entries carry no verdict, so their text is judged again."""
        text = f"{r.get('error') or ''}\n{r.get('detail') or ''}"
        fault = r.get("toolchain_fault") or toolchain_fault(text, [self.pch_dir, str(self.root)])
        return fault is None and r.get("diagnosed", True)

    def _record(self, key: str, ext_dir: Path, out: ChildOutcome) -> BuildOutcome:
        outcome = self._recorded(key, ext_dir, out)
        outcome.info.refused = out.extra.get("refused", [])
        return outcome

    def _recorded(self, key: str, ext_dir: Path, out: ChildOutcome) -> BuildOutcome:
        if out.ok:
            r = out.result or {}
            info = BuildInfo(cache_key=key, status=r.get("status", "ok"),
                             seconds=round(out.wall_s, 3), cuda_header=r.get("cuda_header"))
            if info.status == "ok" or (info.status == "compile_error"
                                       and self._blames_candidate(r)):
                write_json_atomic(ext_dir / MARKER, {**r, "built_s": out.wall_s})
            return BuildOutcome(info, str(ext_dir), error=r.get("error"), detail=r.get("detail"))
        crash = crash_info("build", out)
        info = BuildInfo(cache_key=key, status=status_of(crash), seconds=round(out.wall_s, 3))
        return BuildOutcome(info, str(ext_dir), error=f"build {out.describe()}",
                            detail=out.output_tail[-4000:], crash=crash)

    def _harness_fault(self, key: str, ext_dir: Path, out: ChildOutcome,
                       fault: str) -> BuildOutcome:
        """Failed twice for reasons of ours: say so, cache nothing, blame no one."""
        r = out.result or {}
        info = BuildInfo(cache_key=key, status=HARNESS_ERROR, seconds=round(out.wall_s, 3))
        return BuildOutcome(info, str(ext_dir), error=f"build failed, not the candidate's "
                            f"fault: {fault}", detail=r.get("detail") or out.output_tail[-4000:],
                            harness_error=fault)


def build_probe(builder: Builder, source: str, ext_dir: Path) -> None:
    """Build one of our own sources (pch_warm.py) with the precompiled headers' folder
    writable: no candidate code runs in this child."""
    ext_dir.mkdir(parents=True, exist_ok=True)
    run_isolated(BUILD_TARGET,
                 {"source": source, "extensions_dir": str(ext_dir)}, workdir=ext_dir / "work",
                 timeout_s=builder.timeout_s, mem_limit_mb=builder.mem_limit_mb,
                 env=builder.env, poll_s=BUILD_POLL_S,
                 allow=builder.allow(ext_dir, builder.pch_dir))
