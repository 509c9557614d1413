"""One-shot children: every task that touches candidate code (one build, one run) gets a
new Python process, which runs that task and nothing else."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from kb_eval.isolation.handle import POLL_S, Child
from kb_eval.isolation.outcome import ChildOutcome, outcome
from kb_eval.isolation.spares import SPARES

THREAD_SAFE = True  # run_isolated may be called from many threads at once


def _preload_spec(target: str, warm_cuda: bool) -> str:
    return target.partition(":")[0] + (":cuda" if warm_cuda else "")


def start_spares(target: str, env: dict | None = None, warm_cuda: bool = False) -> None:
    """Spare children for `run_isolated(target, ..., env=env, prewarm=True,
    warm_cuda=warm_cuda)`, started now (and the zygote they fork from, at its first use):
    GPU runs come about once a second and a spare needs seconds to import torch and open
    its CUDA context: four deep; other kinds two. Called ahead of a run's first task too,
    so that its first samples do not wait for them (docs/PERFORMANCE.md)."""
    SPARES.refill(env, _preload_spec(target, warm_cuda), 4 if warm_cuda else 2)


def run_isolated(target: str, payload: dict, *, workdir: Path, timeout_s: float,
                 mem_limit_mb: int | None = None, env: dict | None = None,
                 output_limit_mb: int = 64, prewarm: bool = False,
                 warm_cuda: bool = False, poll_s: float = POLL_S,
                 budget: Callable[[], str | None] | None = None,
                 allow: dict[str, list[str]] | None = None) -> ChildOutcome:
    """Run `target` ("pkg.module:function") as `function(payload, workdir) -> dict` in a
    fresh child. `prewarm` keeps spare children with the same env ready for the next
    calls; `warm_cuda` has them create their CUDA context while they wait (~0.4 s saved
    per task; only an idle context is created, no kernels run). `budget` (see
    Child.watch) may end it early as a "timeout" whose error says which budget. In a
    sandbox (`env` carries its policy: sandbox.py), the task may write only `workdir` and
    `allow["write"]`, and read besides the system only `allow["read"]`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result_path = workdir / "result.json"
    log_path = workdir / "output.log"
    result_path.unlink(missing_ok=True)
    preload = _preload_spec(target, warm_cuda)
    child = SPARES.take(env, preload) if prewarm else None
    if child is None:
        child = Child.start(env, log_path, preload)
    else:
        child.adopt_log(log_path)
    task = {"target": target, "payload": payload, "workdir": str(workdir),
            "result_path": str(result_path), "sandbox": allow or {}}
    t0 = time.monotonic()
    child.send(task)
    if prewarm:  # after the send: the next child's start overlaps this task
        start_spares(target, env, warm_cuda)
    status = child.watch(timeout_s, mem_limit_mb, output_limit_mb << 20, poll_s=poll_s,
                         budget=budget)
    wall = time.monotonic() - t0
    child.kill_all()
    out = outcome(status, child, result_path, wall)
    out.error = child.overran or out.error
    return out
