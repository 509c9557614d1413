"""A long-lived child for trusted work that gains from keeping state between tasks."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from kb_eval.isolation.handle import Child, preload_spec
from kb_eval.isolation.outcome import ChildOutcome, outcome

# How often a call looks for the server's answer: a paired timing waits for 20 reference
# rounds of a few milliseconds each, with its candidate stopped.
ANSWER_POLL_S = 0.001


class Server:
    """A long-lived child for trusted tasks only (never candidate code), which keeps what
    it loaded between tasks. Each `call` is watched like a one-shot child; a server that
    was killed, died or failed a task is ended (unless `survives` says the task's
    exception left it sound), and the next call starts a fresh one."""

    def __init__(self, target: str, env: dict | None, workdir: Path, warm_cuda: bool = False,
                 survives: Callable[[ChildOutcome], bool] | None = None):
        self.target, self.env, self.workdir = target, env, Path(workdir)
        self.survives = survives
        self.preload = preload_spec(target, warm_cuda)
        self.child: Child | None = None
        self.calls = 0

    def start(self) -> None:
        """Start the child now (torch import and CUDA context take seconds)."""
        if self.child is None or self.child.proc.poll() is not None:
            self.close()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.child = Child.start(self.env, self.workdir / f"server_{time.monotonic_ns()}.log",
                                     self.preload + "+serve")

    def call(self, payload: dict, *, timeout_s: float, mem_limit_mb: int | None = None,
             output_limit_mb: int = 64) -> ChildOutcome:
        """One task, watched like a one-shot child; its result file (in call_<n>/, removed
        afterwards) tells the parent that the server answered."""
        self.start()
        self.calls += 1
        workdir = self.workdir / f"call_{self.calls}"
        workdir.mkdir(parents=True, exist_ok=True)
        result_path = workdir / "result.json"
        task = {"target": self.target, "payload": payload, "workdir": str(workdir),
                "result_path": str(result_path)}
        t0 = time.monotonic()
        self.child.send(task, last=False)
        status = self.child.watch(timeout_s, mem_limit_mb, output_limit_mb << 20,
                                  done=result_path, poll_s=ANSWER_POLL_S)
        wall = time.monotonic() - t0
        alive = status is None and self.child.proc.poll() is None
        if not alive:
            self.child.kill_all()
        out = outcome(status, self.child, result_path, wall)
        shutil.rmtree(workdir, ignore_errors=True)
        if not out.ok and not (out.status == "error" and self.survives is not None
                               and self.survives(out)):
            self.close()
        return out

    def close(self) -> None:
        """End the child, if any (the next call starts a fresh one)."""
        if self.child is not None:
            self.child.kill_all()
            self.child = None
