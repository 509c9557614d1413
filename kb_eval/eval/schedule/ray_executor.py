"""The Ray executor (`--ray-address`): builds and device lanes on a Ray cluster, driven
from this process.

    submit() ──► build threads ──► build_on_node (Ray task, any node)
                                   ▼
                              ready queue ──► one driver thread per lane ──► Lane actor
                                              (lane.py, as locally)
    results() ◄── done queue ◄── the record, back from the actor

The driver keeps the run's secret (lanes get per-problem seeds) and alone writes
results.json. The build cache is a path every node sees at the same place (ninja names
absolute paths); a node that does not see the driver's marker refuses to work. A sample
whose lane dies is queued again (`requeued`) on a replacement, twice: `eval_error`.
"""

from __future__ import annotations

import secrets
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.eval.config import BUILDS_PER_CORE
from kb_eval.ray_cluster import NAMESPACE, connect
from kb_eval.eval.schedule.build import (BuildOutcome, cache_key, clear_batons,
                                         clear_old_batons)
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.first_call import first_call_payload
from kb_eval.eval.schedule.leftovers import clear_leftovers
from kb_eval.eval.schedule.pool import _STOP, RecordStream
from kb_eval.eval.schedule.ray_lane import Lane, ProblemFacts, build_on_node, driver_env
from kb_eval.eval.schedule.retry import unjudged
from kb_eval.eval.schedule.sample import SampleTask, finish

LANE_START_S = 300.0  # a lane imports torch and starts its reference server
LANE_LOSSES = 2  # a sample whose lane died this many times is eval_error


# ------------------------------------------------------------------ the pool
class RayPool(RecordStream):
    def __init__(self, ctx: EvalContext):
        super().__init__(ctx)
        import ray

        self.ray = ray
        cfg = ctx.config
        self.started = clear_old_batons(cfg.cache_dir, cfg.build_timeout_s,  # as pool.py
                                        cfg.run_timeout_s)
        clear_leftovers(ctx.invocation_dir)  # this node's, as pool.py
        self.owns_ray = connect(ctx.config.ray_address)
        self.token = secrets.token_hex(4)
        self.spec = self._spec()
        # A build task takes 1/BUILDS_PER_CORE of a CPU: as many builds as a local run.
        cpus = ray.cluster_resources().get("CPU", 1)
        self.builds = ThreadPoolExecutor(max(ctx.config.jobs, int(cpus * BUILDS_PER_CORE)),
                                         thread_name_prefix="kb-ray-build")
        self.build_task = ray.remote(build_on_node).options(num_cpus=1 / BUILDS_PER_CORE)
        self.lane_actor = ray.remote(Lane)
        self.placements = self._placements()
        self.lanes: dict[int, tuple] = {}  # slot -> (actor handle, its ready() answer)
        self.losses: dict[int, list[str]] = {}  # id(task) -> notes of lanes lost with it
        self._key_locks: dict[str, threading.Lock] = {}
        self._alive = len(self.placements)
        self.threads = [threading.Thread(target=self._lane_loop, args=(slot,), daemon=True,
                                         name=f"kb-ray-lane-{slot}")
                        for slot in range(len(self.placements))]
        for t in self.threads:
            t.start()

    def _spec(self) -> dict:
        """What every build task and lane gets of the context (no secret), and the
        marker file that tells them they see the driver's cache."""
        ctx = self.ctx
        marker = ctx.config.cache_dir / "ray-shared" / self.token
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("kb_eval: a node that sees this file sees the driver's cache\n")
        return {"config": ctx.config, "hardware": ctx.hardware, "backend": ctx.backend,
                "device_kind": ctx.device_kind, "arch_list": ctx.arch_list,
                "fingerprint": ctx.fingerprint, "compiler_env": ctx.compiler_env,
                "build_env": ctx.build_env(), "driver_env": driver_env(),
                "invocation_dir": str(ctx.invocation_dir),
                "marker": str(marker)}

    def _placements(self) -> list[dict]:
        """Actor options per lane: each GPU of the cluster, or each live node's CPU."""
        if self.ctx.device_kind == "cuda":
            gpus = int(self.ray.cluster_resources().get("GPU", 0))
            if gpus < 1:
                raise UserError(f"the Ray cluster has no GPU for backend {self.ctx.backend} "
                                f"(--backend cpp runs on CPUs)")
            return [{"num_gpus": 1}] * gpus
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return [{"scheduling_strategy": NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)}
                for n in self.ray.nodes() if n["Alive"]]

    # ---------------------------------------------------------------- builds
    def build_one(self, task: SampleTask) -> BuildOutcome:
        # One build of a source at a time, cluster-wide: the second finds it cached.
        key = cache_key(task.source, self.ctx.fingerprint)
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            ref = self.build_task.remote(self.spec, task.source, str(task.workdir / "build"),
                                         first_call_payload(self.ctx, task))
            return self.ray.get(ref)

    # ---------------------------------------------------------------- lanes
    def _lane_loop(self, slot: int) -> None:
        """A lane's driver thread: start its actor, feed it samples one at a time, and
        start a new one when it dies; ends when closing or when no actor can start."""
        lane = None
        try:
            while not self._closed:
                lane = lane or self._start_lane(slot)
                if lane is None:
                    return
                task = self.ready.get()
                if task is _STOP:
                    return
                if not self._run_on(lane, task):
                    lane = None
        finally:
            self._lane_ended()

    def _start_lane(self, slot: int):
        ray = self.ray
        options = dict(self.placements[slot], num_cpus=0, max_restarts=0, max_concurrency=2,
                       name=f"kb-eval-lane-{self.token}-{slot}-{secrets.token_hex(2)}",
                       namespace=NAMESPACE)
        handle = self.lane_actor.options(**options).remote(self.spec)
        ref, deadline = handle.ready.remote(), time.monotonic() + LANE_START_S
        while not ray.wait([ref], timeout=1.0)[0]:
            if self._closed or time.monotonic() > deadline:
                ray.kill(handle)
                print(f"kb_eval: lane {slot} did not start on the Ray cluster", file=sys.stderr)
                return None
        try:
            info = ray.get(ref)
        except ray.exceptions.RayError as e:
            print(f"kb_eval: lane {slot} could not start: {str(e).splitlines()[0][:200]}",
                  file=sys.stderr)
            return None
        if info["error"]:
            self.failure.append(UserError(info["error"]))
            ray.kill(handle)
            return None
        self.lanes[slot] = (handle, info)
        return handle, info

    def _run_on(self, lane: tuple, task: SampleTask) -> bool:
        """Evaluate one sample on a lane; False when the lane died (the sample is queued
        again, or given up after LANE_LOSSES)."""
        handle, info = lane
        ctx, problem, now = self.ctx, task.problem, time.monotonic()
        facts = ProblemFacts(seed=ctx.problem_seed(problem), baseline=ctx.baseline_for(problem),
                             peak=ctx.baseline_peak(problem),
                             baseline_file=str(ctx.baseline_file) if ctx.baseline_file else None)
        ref = handle.evaluate.remote(task, facts, now - task.started, now - task.laps.mark)
        try:
            record = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self._lane_lost(task, info, e)
            self.ray.kill(handle)
            return False
        record.wall_s = round(time.monotonic() - task.started, 3)  # the driver's clock
        record.lane = f"{info['node']}/{info['device']}"
        if id(task) in self.losses:
            record.requeued = self.losses.pop(id(task))
        self.finish(task, record)
        return True

    def _lane_lost(self, task: SampleTask, info: dict, error: Exception) -> None:
        notes = self.losses.setdefault(id(task), [])
        notes.append(f"lane {info['device']} on {info['node']} died mid-sample "
                     f"({type(error).__name__})")
        again = len(notes) < LANE_LOSSES
        print(f"kb_eval: {notes[-1]}: {task.problem.key} sample {task.sample} "
              f"{'queued again' if again else 'given up (eval_error)'}", file=sys.stderr)
        if again and not self._abandoned:
            task.laps.restart()
            self.ready.put(task)
            return
        record = unjudged(self.ctx, task, "eval_error",
                          f"its device lane died {len(notes)} times while judging it", None)
        record.requeued = self.losses.pop(id(task))
        self.finish(task, finish(record, task))

    def _lane_ended(self) -> None:
        with self._lock:
            self._alive -= 1
            last = self._alive == 0
        if last and not self._closed and not self.failure:
            self.failure.append(UserError(
                "no device lane is left on the Ray cluster (see the lines above); fix the "
                "cluster and continue with --resume"))

    # ---------------------------------------------------------------- closing
    def close(self, abandon: bool = False) -> None:
        """Wait for the lanes (`abandon`: kill what runs, drop what waits), then end the
        actors and, if this run started Ray, Ray."""
        if self._closed:
            return
        self._closed = True
        self.builds.shutdown(wait=not abandon, cancel_futures=True)
        handles = [h for h, _ in self.lanes.values()]
        if abandon:
            self._abandoned = True
            self.drop_queued()
            for h in handles:
                h.abort.remote()
        for _ in self.threads:
            self.ready.put(_STOP)
        for t in self.threads:
            t.join(timeout=60 if abandon else None)
        self._end_actors([h for h, _ in self.lanes.values()])
        # the torch build locks the lanes' and builds' children left (build.py); a minute
        # earlier than the driver's start, for the nodes' clocks
        clear_batons(Path(self.ctx.config.cache_dir) / "builds", since=self.started - 60)
        Path(self.spec["marker"]).unlink(missing_ok=True)
        if not self.ctx.config.keep_workdirs:
            shutil.rmtree(self.ctx.invocation_dir, ignore_errors=True)
        if self.owns_ray:
            self.ray.shutdown()

    def _end_actors(self, handles: list) -> None:
        ray = self.ray
        try:
            ray.get([h.close.remote() for h in handles], timeout=60)
        except ray.exceptions.RayError:
            pass  # a lane that died already has nothing to close
        for h in handles:
            ray.kill(h)
