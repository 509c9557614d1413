"""Whether the sandbox (sandbox.py) starts on this host, and what a child sees in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kb_eval.isolation.sandbox import INSIDE_VAR, Policy, detach, enter, restrict


def probe(policy: Policy) -> str | None:
    """Why a child could not enter the sandbox on this host (None: it can), found by
    entering it in a throwaway child: run before any work, so that a command refuses to
    start rather than fall back silently."""
    read_fd, write_fd = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_fd)
        _probe_child(policy, write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        said = reader.read().decode(errors="replace")
    os.waitpid(middle, 0)
    return None if said == "ok" else (said or "the probe child died")


def probe_afresh(policy: Policy, timeout_s: float = 60.0) -> str | None:
    """`probe` run by a new Python process, for a caller that must not fork (one with
    threads of its own, such as a Ray worker)."""
    cmd = [sys.executable, "-m", "kb_eval.isolation.sandbox_probe", policy.model_dump_json()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"the probe did not answer in {timeout_s:.0f} s"
    said = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and said and said[-1] == "ok":
        return None
    tail = (said or proc.stderr.strip().splitlines() or ["the probe process died"])[-1]
    return tail[:500]


def _probe_child(policy: Policy, fd: int) -> None:
    code = 1
    try:
        detach()
        pid = os.fork()
        if pid == 0:
            try:
                enter(policy)
                restrict()
                os.write(fd, b"ok")
                os._exit(0)
            except BaseException as e:  # noqa: BLE001 - told to the parent
                os.write(fd, f"{e}".encode()[:500])
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        code = 0 if os.waitstatus_to_exitcode(status) == 0 else 1
    except BaseException as e:  # noqa: BLE001 - told to the parent
        os.write(fd, f"{e}".encode()[:500])
    os._exit(code)


def inside(payload: dict, workdir: Path) -> dict:
    """A task that says what a child sees (benchmarks/sandbox_cost.py, tests): its pid,
    the processes in /proc, whether it is sandboxed, and CUDA's state if asked."""
    from kb_eval.isolation.sandbox import leader_pid

    seen = {"pid": os.getpid(), "ppid": os.getppid(), "leader": leader_pid(),
            "sandboxed": bool(os.environ.get(INSIDE_VAR)),
            "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    if payload.get("cuda"):
        import torch

        seen["cuda"] = float(torch.ones(4, device="cuda").sum())  # raises without CUDA
    return seen


if __name__ == "__main__":  # probe_afresh
    print(probe(Policy.model_validate_json(sys.argv[1])) or "ok")
