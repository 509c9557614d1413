"""Run a task in a child process and tell what became of it.

Every task that touches candidate code (one build, one run) gets a new
Python process: `python -m kb_eval.isolation` reads one task from its stdin, calls
`module:function(payload, workdir)`, writes the returned dict to a result file and exits.
The parent never imports what the task runs. It watches the child from outside:
- a wall timeout, a host-memory limit (RSS of the child's process group, polled) and an
  output limit (stdout+stderr go to a log file whose size is polled); any of them kills
  the whole process group;
- after the child ends, the group is killed again, and orphans that the child's
  descendants left (they are re-parented to us, a child subreaper) are killed too;
- the verdict is read from the exit status and the result file only after exit, so a
  crash cannot leave half a message behind.
To hide Python + torch start-up (seconds), spare children per environment are started
ahead and wait, torch imported, for their task on stdin; each spare still runs exactly
one task. Trusted work that gains from keeping state (the reference side: each problem's
model and outputs) runs in a `Server`: one long-lived child, watched the same way per
task, answering each through its result file, replaced by a fresh one when it fails.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "KB_EVAL_SANDBOX"
NICE_VAR = "KB_EVAL_NICE"
POLL_S = 0.005  # how often a watcher looks whether its child is done (GPU lane: latency)
BUILD_POLL_S = 0.05  # builds take tens of seconds: their watchers wake less often
CHECK_S = 0.1  # how often memory and output size are checked
THREAD_SAFE = True  # run_isolated may be called from many threads at once


@dataclass
class ChildOutcome:
    status: str  # ok | error | crashed | timeout | oom | output_flood | no_result
    exit_code: int | None = None
    signal_name: str | None = None
    result: dict | None = None
    error: str | None = None  # exception type and message when status == "error"
    output_tail: str = ""
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "crashed":
            return f"crashed ({self.signal_name or f'exit {self.exit_code}'})"
        return self.error or self.status


# ------------------------------------------------------------------ parent side
def run_isolated(target: str, payload: dict, *, workdir: Path, timeout_s: float,
                 mem_limit_mb: int | None = None, env: dict | None = None,
                 output_limit_mb: int = 64, prewarm: bool = False,
                 warm_cuda: bool = False, poll_s: float = POLL_S) -> ChildOutcome:
    """Run `target` ("pkg.module:function") as `function(payload, workdir) -> dict` in a
    fresh child. `prewarm` keeps spare children with the same env ready for the next
    calls; `warm_cuda` has them create their CUDA context while they wait (~0.4 s saved
    per task; only an idle context is created, no kernels run)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result_path = workdir / "result.json"
    log_path = workdir / "output.log"
    result_path.unlink(missing_ok=True)
    preload = target.partition(":")[0] + (":cuda" if warm_cuda else "")
    child = _SPARES.take(env, preload) if prewarm else None
    if child is None:
        child = _Child.start(env, log_path, preload)
    else:
        child.adopt_log(log_path)
    if prewarm:
        # GPU runs come about once a second and a spare needs ~3.3 s to import torch and
        # open its CUDA context (H200 host): four deep; other kinds two.
        _SPARES.refill(env, preload, 4 if warm_cuda else 2)
    task = {"target": target, "payload": payload, "workdir": str(workdir),
            "result_path": str(result_path)}
    t0 = time.monotonic()
    child.send(task)
    status = child.watch(timeout_s, mem_limit_mb, output_limit_mb << 20, poll_s=poll_s)
    wall = time.monotonic() - t0
    child.kill_all()
    return _outcome(status, child, result_path, wall)


def _outcome(status: str | None, child: "_Child", result_path: Path, wall: float) -> ChildOutcome:
    code = child.proc.returncode
    sig = signal.Signals(-code).name if code is not None and code < 0 else None
    out = ChildOutcome(status=status or "ok", exit_code=code, signal_name=sig,
                       output_tail=child.log_tail(), wall_s=wall)
    if status:  # killed by us: timeout / oom / output_flood
        return out
    message = _read_result(result_path)
    if message is None:
        out.status = "crashed" if (sig or code) else "no_result"
    elif message.get("ok"):
        out.result = message.get("result") or {}
    else:
        out.status = "error"
        out.error = message.get("error", "unknown error")
        out.output_tail = (out.output_tail + "\n" + message.get("traceback", "")).strip()
    return out


def _read_result(path: Path) -> dict | None:
    try:
        message = json.loads(path.read_text())
        return message if isinstance(message, dict) else None
    except (OSError, ValueError):
        return None


class _Child:
    def __init__(self, proc: subprocess.Popen, log_file):
        self.proc = proc
        self.log_file = log_file
        self.log_path = Path(log_file.name)
        self.owner = ""  # name of the thread that sent the task
        self.log_base = 0  # log size when the current task was sent
        _LIVE.add(self)

    @classmethod
    def start(cls, env: dict | None, log_path: Path, preload: str = "") -> "_Child":
        """Start a child that imports torch and `preload` ("module[:cuda]": the task's
        module, and whether to create the CUDA context), then waits for its task."""
        _become_subreaper()
        log_file = open(log_path, "wb")
        full_env = {**os.environ, **(env or {}), MARKER: "1", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "kb_eval.isolation", preload],
                                stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True, close_fds=True)
        return cls(proc, log_file)

    def adopt_log(self, log_path: Path) -> None:
        """A spare was started with a scratch log; point the task's log name at it."""
        try:
            if log_path.exists() or log_path.is_symlink():
                log_path.unlink()
            os.link(self.log_path, log_path)
        except OSError:
            return  # another file system: keep reading the scratch log
        self.log_path.unlink(missing_ok=True)
        self.log_path = log_path

    def send(self, task: dict, last: bool = True) -> None:
        """One task line; `last` closes stdin (a one-shot child), else more may follow."""
        self.owner = threading.current_thread().name
        self.log_base = 0 if last else _file_size(self.log_path)
        try:
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
            if last:
                self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child already died; watch() reports it

    def watch(self, timeout_s: float, mem_limit_mb: int | None, output_limit: int,
              done: Path | None = None, poll_s: float = POLL_S) -> str | None:
        """Wait for exit (or, for a server, for the task's result file `done`); return why
        we killed it (None if it ended, or answered, by itself)."""
        deadline = time.monotonic() + timeout_s
        next_check = 0.0
        while self.proc.poll() is None and not (done is not None and done.exists()):
            now = time.monotonic()
            if now > deadline:
                return "timeout"
            if now >= next_check:
                next_check = now + CHECK_S
                if self._flooded(output_limit):
                    return "output_flood"
                if mem_limit_mb and _RSS.group_mb(self.proc.pid) > mem_limit_mb:
                    return "oom"
            time.sleep(poll_s)
        # A flood written faster than we poll is over the limit all the same.
        return "output_flood" if self._flooded(output_limit) else None

    def _flooded(self, output_limit: int) -> bool:
        return _file_size(self.log_path) - self.log_base > output_limit

    def kill_all(self) -> None:
        _killpg(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.log_file.close()
        _LIVE.discard(self)
        _reap_orphans()

    def log_tail(self, max_bytes: int = 8192, max_lines: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self.log_base, _file_size(self.log_path) - max_bytes))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-max_lines:])


class Server:
    """A long-lived child for trusted tasks only (never candidate code), so it can keep
    what it loaded from one task to the next (the reference side keeps each problem's
    model and outputs). Each `call` is watched like a one-shot child (timeout, memory,
    output) and answers through its own result file; a server that was killed, died or
    failed a task is ended, and the next call starts a fresh one."""

    def __init__(self, target: str, env: dict | None, workdir: Path, warm_cuda: bool = False):
        self.target, self.env, self.workdir = target, env, Path(workdir)
        self.preload = target.partition(":")[0] + (":cuda" if warm_cuda else "")
        self.child: _Child | None = None
        self.calls = 0

    def start(self) -> None:
        """Start the child now (torch import and CUDA context take seconds)."""
        if self.child is None or self.child.proc.poll() is not None:
            self.close()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.child = _Child.start(self.env, self.workdir / f"server_{time.monotonic_ns()}.log",
                                      self.preload + "+serve")

    def call(self, payload: dict, *, timeout_s: float, mem_limit_mb: int | None = None,
             output_limit_mb: int = 64) -> ChildOutcome:
        self.start()
        self.calls += 1
        workdir = self.workdir / f"call_{self.calls}"
        workdir.mkdir(parents=True, exist_ok=True)
        result_path = workdir / "result.json"
        task = {"target": self.target, "payload": payload, "workdir": str(workdir),
                "result_path": str(result_path)}
        t0 = time.monotonic()
        self.child.send(task, last=False)
        status = self.child.watch(timeout_s, mem_limit_mb, output_limit_mb << 20, done=result_path)
        wall = time.monotonic() - t0
        alive = status is None and self.child.proc.poll() is None
        if not alive:
            self.child.kill_all()
        out = _outcome(status, self.child, result_path, wall)
        shutil.rmtree(workdir, ignore_errors=True)
        if not out.ok:
            self.close()
        return out

    def close(self) -> None:
        if self.child is not None:
            self.child.kill_all()
            self.child = None


class _Registry:
    """Children started and not yet ended (running or spare), across threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.children: set[_Child] = set()

    def add(self, child: _Child) -> None:
        with self.lock:
            self.children.add(child)

    def discard(self, child: _Child) -> None:
        with self.lock:
            self.children.discard(child)

    def pids(self) -> set[int]:
        with self.lock:
            return {c.proc.pid for c in self.children}

    def owned_by(self, thread_prefix: str) -> list[_Child]:
        with self.lock:
            return [c for c in self.children if c.owner and c.owner.startswith(thread_prefix)]


_LIVE = _Registry()


def kill_running(thread_prefix: str) -> int:
    """Kill the children working for threads named `thread_prefix*` (abandoned work, e.g.
    on Ctrl-C); their watchers see them exit at once and report them as crashed."""
    children = _LIVE.owned_by(thread_prefix)
    for child in children:
        _killpg(child.proc.pid)
    return len(children)


class _Spares:
    """Up to `depth` waiting children per environment, oldest first; each runs one task.
    A spare has `depth` tasks' time to import torch before it is needed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.waiting: dict[str, list[_Child]] = {}
        self.dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"kb_eval_spares_{os.getpid()}"

    def _key(self, env: dict | None, module: str) -> str:
        return json.dumps([env or {}, module], sort_keys=True)

    def take(self, env: dict | None, module: str) -> _Child | None:
        with self.lock:
            queue = self.waiting.get(self._key(env, module), [])
            child = queue.pop(0) if queue else None
        if child is not None and child.proc.poll() is not None:
            child.kill_all()
            return None
        return child

    def refill(self, env: dict | None, module: str, depth: int) -> None:
        key = self._key(env, module)
        with self.lock:
            queue = self.waiting.setdefault(key, [])
            self.dir.mkdir(parents=True, exist_ok=True)
            while len(queue) < depth:
                log = self.dir / f"spare_{time.monotonic_ns()}.log"
                queue.append(_Child.start(env, log, module))

    def close(self) -> None:
        with self.lock:
            children = [c for queue in self.waiting.values() for c in queue]
            self.waiting = {}
        for child in children:
            child.kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)


_SPARES = _Spares()
atexit.register(_SPARES.close)


# ------------------------------------------------------------------ process hygiene
_SUBREAPER_SET = False


def _become_subreaper() -> None:
    """Orphans of our children re-parent to us (not init), so we can find and end them."""
    global _SUBREAPER_SET
    if _SUBREAPER_SET or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    _SUBREAPER_SET = True


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_children() -> list[int]:
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                found.append(int(entry))
    return found


def _reap_orphans() -> None:
    """Kill and reap re-parented descendants of sandbox children (they carry MARKER)."""
    if not sys.platform.startswith("linux"):
        return
    for pid in _proc_children():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"{MARKER}=1".encode() in environ and pid not in _LIVE.pids():
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _GroupRss:
    """Resident memory per process group, from one pass over /proc shared by every
    watcher (a pass per watcher per check cost the parent a core with 16 builds)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.taken = -1.0
        self.by_group: dict[int, int] = {}

    def group_mb(self, pgid: int) -> float:
        with self.lock:
            if time.monotonic() - self.taken >= CHECK_S / 2:
                self.by_group = _rss_by_group()
                self.taken = time.monotonic()
            return self.by_group.get(pgid, 0) / 1024


def _rss_by_group() -> dict[int, int]:
    """kB resident per process group, every process we can see."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    totals: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            group = int(stat[2])
            totals[group] = totals.get(group, 0) + int(stat[21]) * page_kb
        except (OSError, ValueError, IndexError):
            continue
    return totals


_RSS = _GroupRss()


# ------------------------------------------------------------------ child side
def _child_main() -> None:
    import importlib

    # The expensive start-up, done while we wait as a spare: torch, the task's module,
    # and (if asked) the CUDA context. "+serve": a Server (tasks until stdin closes).
    spec, _, serve = (sys.argv[1] if len(sys.argv) > 1 else "").partition("+")
    # Builds run niced (KB_EVAL_NICE): compiling is throughput work, while a GPU left
    # waiting on a run child's or the reference's CPU time is time lost for good.
    os.nice(int(os.environ.get(NICE_VAR) or 0))
    module, _, cuda = spec.partition(":")
    for name in ["torch"] + ([module] if module else []):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if cuda:
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.init()
                torch.empty(1, device="cuda")
        except Exception:  # noqa: BLE001 - the task itself will meet and report it
            pass
    while line := sys.stdin.readline():
        _run_task(json.loads(line))
        if not serve:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: CUDA and extension destructors can hang or crash there.
    os._exit(0)


def _run_task(task: dict) -> None:
    import importlib

    result_path = Path(task["result_path"])
    os.chdir(task["workdir"])
    try:
        module_name, _, func_name = task["target"].partition(":")
        func = getattr(importlib.import_module(module_name), func_name)
        message = {"ok": True, "result": func(task["payload"], Path(task["workdir"]))}
    except BaseException as e:  # noqa: BLE001 - everything is reported to the parent
        message = {"ok": False, "error": f"{type(e).__name__}: {e}"[:4000],
                   "traceback": traceback.format_exc()[-4000:]}
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(message, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os.replace(tmp, result_path)


if __name__ == "__main__":
    _child_main()
