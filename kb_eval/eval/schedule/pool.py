"""Scheduling: builds on CPU workers, evaluations several at a time per device.

    submit() ──► build pool (`jobs` build children, no GPU visible)
                   │ built (or cached)           │ compile error / build crash
                   ▼                             ▼
             ready queue ──► lane threads per device: candidate child, then the
                             reference server; timing steps one at a time
                                       ▼
    results() ◄─────────────────── done queue

Devices never wait on a compiler. Every candidate's child is fresh; the reference server
runs no candidate code. A bug of ours in one sample becomes its `eval_error` record. A
lane's work is lane.py; on a Ray cluster, ray_executor.py (picked by `make_pool`).
"""

from __future__ import annotations

import itertools
import queue
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from kb_eval.eval.schedule.build import (BuildOutcome, Builder, clear_batons,
                                         clear_old_batons, source_sha256)
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.first_call import first_call_payload
from kb_eval.eval.schedule.leftovers import clear_leftovers
from kb_eval.eval.schedule.overlap import DeviceSlots, lanes_per_device
from kb_eval.eval.schedule.reaper import sweep_escapees
from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.lane import clean_up, evaluate_guarded, internal_error
from kb_eval.eval.schedule.sample import (SampleTask, record_build_failure, run_scratch,
                                          start_children)
from kb_eval.isolation import kill_running
from kb_eval.isolation.procs import resume_starts, stop_all
from kb_eval.problems import Problem
from kb_eval.results import SampleRecord

_STOP = object()
_POOL_IDS = itertools.count()


class RecordStream:
    """What every executor's pool shares: samples in (`submit` counts them), records out
    (`results`), in finishing order. `failure` holds an error that ends the run (an
    executor that lost every device lane, say); `results` raises it."""

    builds: ThreadPoolExecutor  # set by each executor

    def __init__(self, ctx: EvalContext):
        self.ctx = ctx
        self.done: queue.Queue = queue.Queue()
        self.ready: queue.Queue = queue.Queue()  # built samples waiting for a device lane
        self.failure: list[BaseException] = []
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = self._abandoned = False

    def submit(self, problem: Problem, sample: int, source: str, turn: int = 0) -> None:
        """Queue a sample for building (on the executor's build workers, `builds`)."""
        self.builds.submit(self.build, self.new_task(problem, sample, source, turn))

    def new_task(self, problem: Problem, sample: int, source: str, turn: int) -> SampleTask:
        slug = f"{problem.source.replace('/', '_')}_{problem.slug}_s{sample}_t{turn}"
        workdir = self.ctx.invocation_dir / "work" / f"{slug}_{source_sha256(source)[:8]}"
        with self._lock:
            self._pending += 1
        return SampleTask(problem=problem, sample=sample, turn=turn, source=source,
                          workdir=workdir)

    def build(self, task: SampleTask) -> None:
        """A build worker's job: build (the executor's `build_one`), then queue the sample
        for a device, or record why it cannot run."""
        try:
            task.laps.restart()  # not the time queued for a build worker
            task.build = self.build_one(task)
            task.laps.lap("build")
            if task.build.usable:
                self.ready.put(task)
            else:
                self.finish(task, record_build_failure(self.ctx, task))
        except Exception:  # noqa: BLE001 - our bug: record it, keep going
            self.finish(task, internal_error(self.ctx, task))

    def build_one(self, task: SampleTask) -> BuildOutcome:
        raise NotImplementedError

    def finish(self, task: SampleTask, record: SampleRecord) -> None:
        if self._abandoned:
            return
        clean_up(self.ctx, task)
        self.done.put(record)

    def drop_queued(self) -> None:
        """Forget the built samples no lane has taken yet (the run is being abandoned)."""
        while True:
            try:
                self.ready.get_nowait()
            except queue.Empty:
                return

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def results(self, intake_done: threading.Event, intake_error: list) -> Iterator[SampleRecord]:
        """Records as they finish, until intake is over and nothing is pending."""
        while True:
            try:
                record = self.done.get(timeout=0.2)
            except queue.Empty:
                if intake_error or self.failure:
                    raise (intake_error or self.failure)[0]
                if intake_done.is_set() and self.pending == 0:
                    return
                continue
            with self._lock:
                self._pending -= 1
            yield record


def make_pool(ctx: EvalContext) -> RecordStream:
    """The pool of the configured executor: this machine's threads, or a Ray cluster."""
    if ctx.config.executor == "ray":
        from kb_eval.eval.schedule.ray_executor import RayPool  # ray is an optional extra

        return RayPool(ctx)
    return EvalPool(ctx)


class EvalPool(RecordStream):
    def __init__(self, ctx: EvalContext):
        super().__init__(ctx)
        resume_starts()  # an earlier pool of this process may have stopped them
        cfg = ctx.config
        # locks the run's children leave are younger than this (close)
        self.started = clear_old_batons(cfg.cache_dir, cfg.build_timeout_s, cfg.run_timeout_s)
        clear_leftovers(ctx.invocation_dir)  # of runs killed outright (leftovers.py)
        self.builder = Builder(root=cfg.cache_dir / "builds",
                               fingerprint=ctx.fingerprint, env=ctx.build_env(),
                               timeout_s=cfg.build_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        self.refs = ReferenceStore(ctx)
        for d in ctx.devices:
            start_children(ctx, d)
        self.prefix = f"kb-eval-{next(_POOL_IDS)}-"  # names this pool's threads
        self.builds = ThreadPoolExecutor(cfg.jobs, thread_name_prefix=self.prefix + "build")
        # lane_depth samples in flight per device, and a few more waiting (overlap.py)
        self.slots = {d: DeviceSlots(cfg.lane_depth) for d in ctx.devices}
        self.devices = [threading.Thread(target=self._device_loop, args=(d,), daemon=True,
                                         name=f"{self.prefix}device-{d}-{k}")
                        for d in ctx.devices for k in range(lanes_per_device(cfg.lane_depth))]
        for t in self.devices:
            t.start()

    def build_one(self, task: SampleTask) -> BuildOutcome:
        return self.builder.build(task.source, task.workdir / "build",
                                  first_call_payload(self.ctx, task))

    # ---------------------------------------------------------------- devices
    def _device_loop(self, device: str) -> None:
        slots = self.slots[device]
        while True:
            with slots.intake() as done:  # a lane past its sample's timing takes no more
                if (task := self.ready.get()) is _STOP:
                    return
                task.intake_done = done
                record = evaluate_guarded(self.ctx, self.refs, task, device, slots)
            self.finish(task, record)
            if self._abandoned:
                kill_running(self.prefix)

    def close(self, abandon: bool = False) -> None:
        """Wait for the threads; `abandon` (Ctrl-C, consumer gone): drop queued work and
        kill running children instead of waiting for them."""
        if self._closed:
            return
        self._closed = True
        self.builds.shutdown(wait=not abandon, cancel_futures=True)
        if abandon:
            self._abandoned = True
            self.drop_queued()
            stop_all()  # no child starts now; those running are killed
            self.builds.shutdown(wait=True)
        for _ in self.devices:
            self.ready.put(_STOP)
        for t in self.devices:
            t.join()
        self.refs.close()
        sweep_escapees(min_age_s=0.0)  # nothing of ours is starting now
        clear_batons(self.builder.root, since=self.started)  # every child has ended
        shutil.rmtree(run_scratch(), ignore_errors=True)
        if not self.ctx.config.keep_workdirs:
            shutil.rmtree(self.ctx.invocation_dir, ignore_errors=True)
