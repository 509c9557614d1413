"""The child side (`python -m kb_eval.isolation`): read one task from stdin (a server:
tasks until stdin closes), call `module:function(payload, workdir)` and write the result
or the exception to the task's result file, renamed into place so it is never half read."""

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
    ("module[:cuda][+serve]") comes from the command line or from the forking zygote."""
    if spec is None:
        spec = sys.argv[1] if len(sys.argv) > 1 else ""
        _sandbox_started_afresh()
    spec, _, serve = spec.partition("+")
    # Builds run niced: a GPU left waiting for a run child's CPU time is time lost for good.
    os.nice(int(os.environ.get(NICE_VAR) or 0))
    if os.environ.get(CORES_VAR):
        os.sched_setaffinity(0, {int(c) for c in os.environ[CORES_VAR].split(",")})
    module, _, cuda = spec.partition(":")
    _preload(module, bool(cuda))
    # Start-up objects live as long as the process: frozen out of the cyclic collector,
    # the full collection before each timing walks only what came after.
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
    """A child started afresh enters the sandbox here, before torch: this process stays
    outside as the group's leader and ends as the sandboxed child it forks ended."""
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
    """Import torch and the task's module, create the CUDA context if asked, and run the
    module's `warm_up()` if any; a failure here is left for the task to meet and report."""
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
