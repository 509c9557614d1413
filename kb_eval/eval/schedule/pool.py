"""Scheduling: builds on CPU workers, evaluations one at a time per device.

    submit() ──► build pool (ThreadPoolExecutor of `jobs` build children, no GPU visible)
                   │ built (or cached)           │ compile error / build crash
                   ▼                             ▼
             ready queue ──► one thread per device (GPU id or "cpu"): candidate child,
                             then the reference server, which compares on the device
                                       │
                                       ▼
    results() ◄─────────────────── done queue

Devices never wait on a compiler: a sample reaches the ready queue only once built, and
builds of later samples go on while devices evaluate. Every candidate's child is fresh,
so a child that hit a CUDA error is never reused (the reference server runs no candidate
code and is replaced after any failure). Builds run niced, so they never slow a device. A bug of ours in one sample becomes
that sample's `eval_error` record; the run goes on.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from kb_eval.eval.schedule.build import Builder, source_sha256
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.reaper import sweep_escapees
from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.retry import evaluate_sample
from kb_eval.eval.schedule.sample import (SHM, SampleTask, finish, new_record,
                                 record_build_failure)
from kb_eval.isolation import kill_running
from kb_eval.problems import Problem
from kb_eval.results import SampleRecord

_STOP = object()
_POOL_IDS = itertools.count()


class EvalPool:
    def __init__(self, ctx: EvalContext):
        cfg = ctx.config
        self.ctx = ctx
        self.builder = Builder(root=cfg.cache_dir / "builds",
                               fingerprint=ctx.fingerprint, env=ctx.build_env(),
                               timeout_s=cfg.build_timeout_s, mem_limit_mb=cfg.mem_limit_mb)
        self.refs = ReferenceStore(ctx)
        self.prefix = f"kb-eval-{next(_POOL_IDS)}-"  # names this pool's threads
        self.builds = ThreadPoolExecutor(cfg.jobs, thread_name_prefix=self.prefix + "build")
        self.ready: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = self._abandoned = False
        self.devices = [threading.Thread(target=self._device_loop, args=(d,), daemon=True,
                                         name=f"{self.prefix}device-{d}") for d in ctx.devices]
        for t in self.devices:
            t.start()

    # ---------------------------------------------------------------- intake
    def submit(self, problem: Problem, sample: int, source: str, turn: int = 0) -> None:
        slug = f"{problem.source.replace('/', '_')}_{problem.slug}_s{sample}_t{turn}"
        workdir = self.ctx.invocation_dir / "work" / f"{slug}_{source_sha256(source)[:8]}"
        task = SampleTask(problem=problem, sample=sample, turn=turn, source=source,
                          workdir=workdir)
        with self._lock:
            self._pending += 1
        self.builds.submit(self._build, task)

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _build(self, task: SampleTask) -> None:
        try:
            task.laps.restart()  # not the time queued for a build worker
            task.build = self.builder.build(task.source, task.workdir / "build")
            task.laps.lap("build")
            if task.build.usable:
                self.ready.put(task)
            else:
                self._finish(task, record_build_failure(self.ctx, task))
        except Exception:  # noqa: BLE001 - our bug: record it, keep going
            self._finish(task, self._internal_error(task))

    # ---------------------------------------------------------------- devices
    def _device_loop(self, device: str) -> None:
        while (task := self.ready.get()) is not _STOP:
            record = self._evaluate_retrying(task, device)
            self._finish(task, record)
            if self._abandoned:
                kill_running(self.prefix)

    def _evaluate_retrying(self, task: SampleTask, device: str) -> SampleRecord:
        """An exception of ours while evaluating: once more from the start (a passing
        fault), then the sample's `eval_error` record; the run goes on either way."""
        for attempt in (1, 2):
            try:
                record = evaluate_sample(self.ctx, self.refs, task, device)
                if attempt == 2:
                    record.retried = record.retried or "an exception in the evaluator"
                return record
            except Exception:  # noqa: BLE001 - our bug: record it, keep going
                if attempt == 2:
                    return self._internal_error(task)
                task.laps.restart()
        raise AssertionError("unreachable")

    def _internal_error(self, task: SampleTask) -> SampleRecord:
        text = traceback.format_exc()
        print(f"kb_eval.eval: internal error on {task.problem.key} sample {task.sample}:\n"
              f"{text}", file=sys.stderr)
        record = new_record(self.ctx, task)
        if task.build is not None:
            record.build = task.build.info
        record.status, record.error = "eval_error", text.strip().splitlines()[-1][:300]
        record.detail = text[-4000:]
        return finish(record, task)

    def _finish(self, task: SampleTask, record: SampleRecord) -> None:
        if self._abandoned:
            return
        if not self.ctx.config.keep_workdirs:
            shutil.rmtree(task.workdir, ignore_errors=True)
        if task.scratch is not None:  # in memory: never kept, it is RAM
            shutil.rmtree(task.scratch, ignore_errors=True)
        self.done.put(record)

    # ---------------------------------------------------------------- output
    def results(self, intake_done: threading.Event, intake_error: list) -> Iterator[SampleRecord]:
        """Records as they finish, until intake is over and nothing is pending."""
        while True:
            try:
                record = self.done.get(timeout=0.2)
            except queue.Empty:
                if intake_error:
                    raise intake_error[0]
                if intake_done.is_set() and self.pending == 0:
                    return
                continue
            with self._lock:
                self._pending -= 1
            yield record

    def close(self, abandon: bool = False) -> None:
        """Wait for the threads; `abandon` (Ctrl-C, consumer gone): drop queued work and
        kill running children instead of waiting for them."""
        if self._closed:
            return
        self._closed = True
        self.builds.shutdown(wait=not abandon, cancel_futures=True)
        if abandon:
            self._abandoned = True
            while True:
                try:
                    self.ready.get_nowait()
                except queue.Empty:
                    break
            kill_running(self.prefix)
            self.builds.shutdown(wait=True)
        for _ in self.devices:
            self.ready.put(_STOP)
        for t in self.devices:
            t.join()
        self.refs.close()
        sweep_escapees(min_age_s=0.0)  # nothing of ours is starting now
        shutil.rmtree(SHM / f"kb_eval_{os.getpid()}", ignore_errors=True)
        if not self.ctx.config.keep_workdirs:
            shutil.rmtree(self.ctx.invocation_dir, ignore_errors=True)
