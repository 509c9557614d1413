"""The child side: what runs in the child process (`python -m kb_eval.isolation`).

It reads one task from its stdin (a server: tasks until stdin closes), calls
`module:function(payload, workdir)` and writes the returned dict (or the exception) to the
task's result file, renamed into place so that the parent never reads half of it."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import traceback
from pathlib import Path

NICE_VAR = "KB_EVAL_NICE"
CORES_VAR = "KB_EVAL_CORES"  # the cores a child may use (never a GPU timing core)


def child_main(spec: str | None = None) -> None:
    """The child's whole life: start up, run its task (or a server's tasks), exit. `spec`
    ("module[:cuda][+serve]") comes from the command line, or from the zygote that forked
    this child (zygote.py)."""
    # The expensive start-up, done while we wait as a spare: torch, the task's module,
    # and (if asked) the CUDA context. "+serve": a Server (tasks until stdin closes).
    if spec is None:
        spec = sys.argv[1] if len(sys.argv) > 1 else ""
        _sandbox_started_afresh()
    spec, _, serve = spec.partition("+")
    # Builds run niced (KB_EVAL_NICE): compiling is throughput work, while a GPU left
    # waiting on a run child's or the reference's CPU time is time lost for good.
    os.nice(int(os.environ.get(NICE_VAR) or 0))
    if os.environ.get(CORES_VAR):
        os.sched_setaffinity(0, {int(c) for c in os.environ[CORES_VAR].split(",")})
    module, _, cuda = spec.partition(":")
    _preload(module, bool(cuda))
    # What the start-up made (torch, our modules) lives as long as the process: frozen out
    # of the cyclic collector, a full collection (timing.time_calls runs one before each
    # timing, on both sides) walks only what came after: 70-100 ms less per collection.
    # Reference counting still frees everything; a candidate's objects are never frozen.
    gc.freeze()
    while line := sys.stdin.readline():
        run_task(json.loads(line))
        if not serve:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: CUDA and extension destructors can hang or crash there.
    os._exit(0)


def _sandbox_started_afresh() -> None:
    """A child started afresh (not forked by a zygote) enters the sandbox here, before
    torch: this process stays outside as the group's leader, waits for the sandboxed
    child it forks and ends as it ended (the same exit status or signal)."""
    from kb_eval.isolation import sandbox

    policy = sandbox.policy_from_env()
    if policy is None or os.environ.get(sandbox.INSIDE_VAR):
        return
    leader = os.getpid()
    sandbox.detach()
    pid = os.fork()
    if pid == 0:
        sandbox.set_leader(leader)
        sandbox.enter(policy)
        sandbox.become_init()  # returns in the child proper
        return
    os.close(0)  # the task channel is the child's alone: its end is seen when it ends
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _preload(module: str, cuda: bool) -> None:
    """Import torch and the task's module, create the CUDA context if asked, then run the
    module's `warm_up()` if it has one (what its first task would otherwise pay); a
    failure here is left for the task itself to meet and report."""
    import importlib

    loaded = {}
    for name in ["torch"] + ([module] if module else []):
        try:
            loaded[name] = importlib.import_module(name)
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
    warm_up = getattr(loaded.get(module), "warm_up", None)
    if callable(warm_up):
        try:
            warm_up()
        except Exception:  # noqa: BLE001 - likewise
            pass


def _narrow(task: dict) -> None:
    """In a sandboxed child: Landlock's second layer (this task's folders only), the
    user's folders pointed into the task's, and the audit hook that tells refusals."""
    from kb_eval.isolation import refusals, sandbox

    if not os.environ.get(sandbox.INSIDE_VAR):  # set only by entering the sandbox
        return
    workdir = task["workdir"]
    allowed = task.get("sandbox") or {}
    writable = [workdir, *allowed.get("write", [])]
    sandbox.narrow(writable, allowed.get("read", []))
    tmp = Path(workdir) / "tmp"
    tmp.mkdir(exist_ok=True)
    for name, value in (("HOME", workdir), ("TMPDIR", tmp), ("XDG_CACHE_HOME", tmp),
                        ("TORCHINDUCTOR_CACHE_DIR", tmp / "inductor"),
                        ("CUDA_CACHE_PATH", tmp / "nv")):
        os.environ[name] = str(value)
    os.environ.setdefault("TRITON_CACHE_DIR", str(tmp / "triton"))
    import tempfile

    tempfile.tempdir = None  # found again under the new TMPDIR
    refusals.install(Path(workdir), writable[1:])


def run_task(task: dict) -> None:
    """Run one task in its workdir; everything it raises is reported, nothing escapes."""
    import importlib

    result_path = Path(task["result_path"])
    os.chdir(task["workdir"])
    try:
        _narrow(task)
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
