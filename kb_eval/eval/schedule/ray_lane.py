"""What the Ray executor runs in Ray's worker processes (trusted: candidate code still
runs only in fresh children): `build_on_node`, a task building one source into the shared
cache, and `Lane`, an actor judging samples on one device with its own reference server.
A lane gets only each problem's derived seed and baseline figures (`ProblemFacts`), and
first kills children whose evaluator is gone (procs.end_orphans_of_dead_runs).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule import pch_warm
from kb_eval.eval.schedule.build import BuildOutcome, Builder, front_name, toolchain_fingerprint
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.lane import clean_up, evaluate_guarded
from kb_eval.eval.schedule.reaper import sweep_escapees
from kb_eval.eval.schedule.sample import SampleTask, run_scratch, start_children
from kb_eval.isolation.procs import LIVE, end_orphans_of_dead_runs, killpg
from kb_eval.results import HardwareInfo, SampleRecord
from kb_eval.timing import TimingStats

# Ray's variables that would hand a candidate child the cluster (address, credentials):
# dropped from a lane's environment, which its children inherit.
RAY_SECRETS = ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
# What Ray sets in its workers' environment that a local run's children do not see (one
# OpenMP thread, which would slow the children's CPU-side ops).
RAY_SETS = ("OMP_NUM_THREADS",)


def driver_env() -> dict[str, str | None]:
    """The driver's values of RAY_SETS (None: unset), for its lanes and build tasks."""
    return {name: os.environ.get(name) for name in RAY_SETS}


def adopt_driver_env(values: dict[str, str | None]) -> None:
    """This worker's environment as the driver's for RAY_SETS, before any child starts."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@dataclass
class ProblemFacts:
    """What a lane needs of the driver's context for one problem."""
    seed: int  # derived from the secret for this problem (the candidate child's seed too)
    baseline: TimingStats | None
    peak: int | None  # the baseline's peak memory, for the memory plan
    baseline_file: str | None


@dataclass
class LaneContext(EvalContext):
    """The driver's EvalContext as a lane sees it: no secret (None: nothing here derives
    seeds) and per-problem facts from the driver."""
    facts: dict[str, ProblemFacts] = field(default_factory=dict)

    def problem_seed(self, problem) -> int:
        return self.facts[problem.key].seed

    def baseline_for(self, problem) -> TimingStats | None:
        return self.facts[problem.key].baseline

    def baseline_peak(self, problem) -> int | None:
        return self.facts[problem.key].peak


def shared_cache_error(spec: dict) -> str | None:
    """Why this node cannot use the driver's build cache (None: it sees it). The driver
    wrote `spec["marker"]` under the cache folder before starting anything."""
    if Path(spec["marker"]).is_file():
        return None
    import ray

    return (f"the build cache (DEFAULTS cache_dir) {spec['config'].cache_dir} is not "
            f"shared with node {ray.util.get_node_ip_address()}: builds and lanes must see "
            f"one cache, give a path every node mounts (see README, 'On a Ray cluster')")


def build_on_node(spec: dict, source: str, workdir: str,
                  first_call: dict | None = None) -> BuildOutcome:
    """A Ray task: build one source into the shared cache (the local pool's Builder)."""
    why = shared_cache_error(spec)
    if why:
        raise RuntimeError(why)
    adopt_driver_env(spec["driver_env"])
    cfg = spec["config"]
    # No spares: each Ray worker would keep its own idle torch imports beside the compilers.
    builder = Builder(root=cfg.cache_dir / "builds", fingerprint=spec["fingerprint"],
                      env=spec["build_env"], timeout_s=cfg.build_timeout_s,
                      mem_limit_mb=cfg.mem_limit_mb, spares=False, warm_pch=False)
    pch_warm.warm_once(builder)  # once per Ray worker, before its first build
    try:
        return builder.build(source, Path(workdir), first_call)
    finally:
        if not cfg.keep_workdirs:
            shutil.rmtree(workdir, ignore_errors=True)


# ------------------------------------------------------------------ the lane
def lane_device(device_kind: str) -> str:
    """The lane's device as children's CUDA_VISIBLE_DEVICES names it: the GPU Ray gave
    this actor (num_gpus=1), or "cpu"."""
    if device_kind != "cuda":
        return "cpu"
    import ray

    return str(ray.get_gpu_ids()[0])


def node_mismatch(spec: dict, ctx: EvalContext) -> str | None:
    """Why this node must not judge for the driver (None: it may): results are compared
    with the driver's baseline and cache keys, so its toolchain and GPU must be the same."""
    import ray

    node = ray.util.get_node_ip_address()
    fingerprint = toolchain_fingerprint(ctx.arch_list, front=front_name(ctx.compiler_env))
    if fingerprint != spec["fingerprint"]:
        return (f"node {node}'s toolchain differs from the driver's ({fingerprint} vs "
                f"{spec['fingerprint']}): give every node the same image")
    if ctx.device_kind == "cuda":
        here = HardwareInfo.detect("cuda")
        if here.slug != ctx.hardware.slug:
            return (f"node {node} has a {here.name}, the driver a {ctx.hardware.name}: one "
                    f"run judges on one kind of GPU (its baseline's)")
    return None


def node_sandbox_error(config) -> str | None:
    """Why this node cannot run the driver's candidates sandboxed (None: it can, or the
    run has --no-sandbox): the driver's own probe says nothing of another host."""
    if not config.sandbox:
        return None
    import ray

    from kb_eval.isolation.sandbox import Policy
    from kb_eval.isolation.sandbox_probe import probe_afresh

    why = probe_afresh(Policy(write=[str(config.cache_dir)]))
    if why is None:
        return None
    return (f"node {ray.util.get_node_ip_address()} cannot start the sandbox "
            f"({why.splitlines()[0]}); --no-sandbox runs candidates without it")


class Lane:
    """A Ray actor: one device lane. The driver calls `ready` once, then `evaluate` per
    sample (one at a time), `abort` to kill what runs (Ctrl-C), `close` at the end."""

    def __init__(self, spec: dict):
        import ray

        for name in RAY_SECRETS:
            os.environ.pop(name, None)
        adopt_driver_env(spec["driver_env"])
        end_orphans_of_dead_runs()  # of lanes killed outright on this node
        self.device = lane_device(spec["device_kind"])
        self.node = ray.util.get_node_ip_address()
        self.ctx = LaneContext(
            config=spec["config"], hardware=spec["hardware"], backend=spec["backend"],
            device_kind=spec["device_kind"], devices=[self.device],
            arch_list=spec["arch_list"], fingerprint=spec["fingerprint"],
            invocation_dir=Path(spec["invocation_dir"]), compiler_env=spec["compiler_env"],
            secret=None)
        self.error = (shared_cache_error(spec) or node_mismatch(spec, self.ctx)
                      or node_sandbox_error(self.ctx.config))
        self.refs = None if self.error else ReferenceStore(self.ctx)
        if self.refs is not None:
            start_children(self.ctx, self.device)

    def ready(self) -> dict:
        return {"node": self.node, "device": self.device, "error": self.error}

    def evaluate(self, task: SampleTask, facts: ProblemFacts, since_start: float,
                 since_mark: float) -> SampleRecord:
        """Judge one built sample. The task's clocks come from the driver's machine:
        rebased on this one's by how long ago they were set."""
        now = time.monotonic()
        task.started, task.laps.mark = now - since_start, now - since_mark
        self.ctx.facts[task.problem.key] = facts
        self.ctx.baseline_file = Path(facts.baseline_file) if facts.baseline_file else None
        record = evaluate_guarded(self.ctx, self.refs, task, self.device)
        clean_up(self.ctx, task)
        return record

    def abort(self) -> int:
        """Kill every child of this lane (the sample in flight then ends at once)."""
        with LIVE.lock:
            children = list(LIVE.children)
        for child in children:
            killpg(child.proc.pid)
        return len(children)

    def close(self) -> None:
        if self.refs is not None:
            self.refs.close()
        self.abort()  # the spare children: nobody is left to give them a task
        sweep_escapees(min_age_s=0.0)
        shutil.rmtree(run_scratch(), ignore_errors=True)
        if not self.ctx.config.keep_workdirs:  # this node's copy of the run's scratch
            shutil.rmtree(self.ctx.invocation_dir, ignore_errors=True)
