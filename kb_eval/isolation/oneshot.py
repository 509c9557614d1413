"""One-shot children: every task that touches candidate code gets a new Python process,
which runs that task and nothing else."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from kb_eval.isolation.handle import POLL_S, Child, preload_spec
from kb_eval.isolation.outcome import ChildOutcome, outcome
from kb_eval.isolation.spares import SPARES


def start_spares(target: str, env: dict | None = None, warm_cuda: bool = False) -> None:
    """Start spare children for `run_isolated(target, ..., env=env, prewarm=True,
    warm_cuda=warm_cuda)` now: four deep with a CUDA context (GPU runs come about once a
    second, a spare takes seconds to start), else two."""
    SPARES.refill(env, preload_spec(target, warm_cuda), 4 if warm_cuda else 2)


def run_isolated(target: str, payload: dict, *, workdir: Path, timeout_s: float,
                 mem_limit_mb: int | None = None, env: dict | None = None,
                 output_limit_mb: int = 64, prewarm: bool = False,
                 warm_cuda: bool = False, poll_s: float = POLL_S,
                 budget: Callable[[], str | None] | None = None,
                 allow: dict[str, list[str]] | None = None) -> ChildOutcome:
    """Run `target` ("pkg.module:function") as `function(payload, workdir) -> dict` in a
    fresh child. `prewarm` keeps spare children with the same env ready; `warm_cuda` has
    them open an idle CUDA context while they wait. `budget` (Child.watch) may end it
    early as a "timeout". In a sandbox (`env` carries its policy), the task may write only
    `workdir` and `allow["write"]`, and read besides the system only `allow["read"]`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result_path = workdir / "result.json"
    log_path = workdir / "output.log"
    result_path.unlink(missing_ok=True)
    preload = preload_spec(target, warm_cuda)
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
