"""The zygote: `python -m kb_eval.isolation.zygote FD`, a process that has imported torch
(and the task modules asked for) once and forks a fresh child per task.

It runs no task and no candidate code, and never initialises CUDA; before every fork it
checks that (and that no other Python thread runs), else refuses. Protocol on the unix
socket FD, one message each way per request:
  parent -> zygote: {"spec": "module[:cuda]"} with two fds: the task channel, the log.
  zygote -> parent: {"ok": true} once the child exists, re-parented (double fork), or
                    {"error": "..."}.
The child writes its pid on the task channel once it has its own session (and entered
the sandbox when asked): a child that could not is never handed a task.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import threading
import warnings

from kb_eval.isolation import sandbox

# OpenBLAS's idle threads are safe across a fork; Python 3.12 warns about any fork with
# threads, but the check that matters is ours (fork_hazard).
warnings.filterwarnings("ignore", message=r".*fork\(\).*", category=DeprecationWarning)


def fork_hazard() -> str | None:
    """Why forking this process now would be unsafe, or None."""
    if threading.active_count() > 1:
        return f"{threading.active_count()} Python threads"
    with open("/proc/self/maps") as maps:
        if any("libcuda" in line for line in maps) and _cuda_driver_initialised():
            return "CUDA driver initialised"
    return None


def _cuda_driver_initialised() -> bool:
    """Whether cuInit has run in this process (asked without running it: before cuInit
    every driver call but a few answers CUDA_ERROR_NOT_INITIALIZED, 3). Unknown: True."""
    import ctypes

    try:  # RTLD_NOLOAD: the copy already mapped, or nothing
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        context = ctypes.c_void_p()
        return driver.cuCtxGetCurrent(ctypes.byref(context)) != 3
    except (OSError, AttributeError):
        return True


def main(fd: int) -> None:
    control = socket.socket(fileno=fd)
    for name in ("torch", "kb_eval.isolation.child"):  # the start-up every child would pay
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if sandbox.policy_from_env() is not None:
        sandbox.read_roots(sandbox.Policy())  # found once here, for every child
        sandbox.preload()
    hazard = fork_hazard()
    control.send(json.dumps({"ready": hazard is None, "error": hazard}).encode())
    while hazard is None:
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 2)
        except OSError:
            break
        if not message:
            break  # the parent closed its end (or died): nothing more to fork for
        reply = spawn(json.loads(message), fds, control)
        for passed in fds:
            os.close(passed)
        control.send(json.dumps(reply).encode())
    os._exit(0)


def spawn(request: dict, fds: list[int], control: socket.socket) -> dict:
    """Fork one child for `request["spec"]`, re-parented to our parent (a subreaper) by a
    double fork, so that the parent can wait for it, stop it and kill its group."""
    if len(fds) != 2:
        return {"error": f"{len(fds)} fds passed, 2 expected"}
    spec = str(request.get("spec", ""))
    module, _, mode = spec.partition(":")
    # A GPU child's task module is imported after the fork, in the child: the evaluator's
    # worker imports left the CUDA driver initialised, which ends forking.
    if module and mode != "cuda":
        try:
            importlib.import_module(module)  # once here; every later child has it
        except Exception:  # noqa: BLE001 - the child's own preload meets and reports it
            pass
    if (hazard := fork_hazard()) is not None:
        return {"error": f"cannot fork: {hazard}"}
    sys.stdout.flush()
    sys.stderr.flush()
    middle = os.fork()
    if middle == 0:
        _middle(spec, fds, control)
    os.waitpid(middle, 0)
    return {"ok": True}


def _middle(spec: str, fds: list[int], control: socket.socket) -> None:
    """Between the zygote and the child: enter the sandbox's namespaces, fork the child
    (process 1 of a new PID namespace), send its pid once it is ready, and exit so that
    it re-parents to the evaluator (a subreaper)."""
    code = 0
    try:
        policy = sandbox.policy_from_env()
        if policy is not None:
            sandbox.detach()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            _become_child(spec, fds, control, policy, ready_w)
        os.close(ready_w)
        if os.read(ready_r, 1) == b"1":  # else it died entering: the parent sees EOF
            os.write(fds[0], f"{pid}\n".encode())
    except BaseException as e:  # noqa: BLE001 - the parent sees no pid and starts afresh
        print(f"kb_eval zygote: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        code = 71
    os._exit(code)


def _become_child(spec: str, fds: list[int], control: socket.socket,
                  policy: sandbox.Policy | None, ready: int) -> None:
    """In the new child: its own session, the sandbox if asked, the task channel as stdin,
    the log as stdout and stderr, no other zygote descriptor; then child_main."""
    try:
        os.setsid()
        task, log = fds
        os.dup2(task, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if policy is not None:
            sandbox.enter(policy)
            sandbox.become_init()  # returns in the child proper
        os.write(ready, b"1")
        control.detach()
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = open(0, "r", closefd=False)  # a fresh reader: nothing buffered
        from kb_eval.isolation.child import child_main

        child_main(spec)
    except BaseException as e:  # noqa: BLE001 - said in the log, for the parent
        import traceback

        print(f"kb_eval child: {type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}",
              file=sys.stderr, flush=True)
    finally:
        os._exit(70)  # child_main exits by itself; reaching here is a failure


if __name__ == "__main__":
    main(int(sys.argv[1]))
