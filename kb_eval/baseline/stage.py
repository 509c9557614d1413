"""Time every selected reference, each in its own child process, into one baseline file
per hardware and precision (and compile mode). The file is rewritten atomically after
every problem, so an interrupted run loses nothing and `--resume` picks up after it."""

from __future__ import annotations

import os
import secrets
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from kb_eval.errors import UserError
from kb_eval.eval.schedule import pinning
from kb_eval.isolation import run_isolated
from kb_eval.problems import Problem
from kb_eval.results import (BaselineFile, BaselineRecord, HardwareInfo, Producer,
                             baseline_path, now_iso, read_model, write_json_atomic)
from kb_eval.timing import TIMED_PROCESS_ENV, TimingSettings

TASK = "kb_eval.baseline.task:time_reference"


@dataclass
class BaselineJob:
    problems: list[Problem]
    precision: str
    mode: str  # eager | compile-default | compile-reduce-overhead | compile-max-autotune
    timing: TimingSettings
    results_dir: Path
    device: str  # cuda | cpu
    gpus: list[int]
    timeout_s: float
    mem_limit_mb: int
    resume: bool = False
    retry_failed: bool = False
    force: bool = False
    output: Path | None = None


def run_baseline(job: BaselineJob, progress: bool = True) -> tuple[Path, BaselineFile]:
    hardware = HardwareInfo.detect(job.device)
    path = job.output or default_path(job, hardware)
    data = _open_file(path, job, hardware)
    todo = [p for p in job.problems if not _done(data, p.key, job.retry_failed)
            or not job.resume]
    skipped = len(job.problems) - len(todo)
    if skipped:
        print(f"resume: {skipped} problem(s) already in {path}, {len(todo)} to time")
    write_json_atomic(path, data)
    secret = secrets.randbits(63)
    bar = tqdm(total=len(todo), desc=f"baseline {job.precision} {job.mode}", unit="problem",
               disable=not progress)
    with tempfile.TemporaryDirectory(prefix="kb_baseline_") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, len(job.gpus))) as pool:
        slots = list(job.gpus) or [None]
        queue = list(todo)
        futures = {}
        for slot in slots[:len(queue)]:
            futures[pool.submit(_time_one, queue.pop(0), job, secret, slot, Path(tmp))] = slot
        failures = 0
        while futures:
            done = next(as_completed(futures))
            slot = futures.pop(done)
            record = done.result()
            failures += record.status != "ok"
            data.records[record.key] = record
            data.updated = now_iso()
            write_json_atomic(path, data)
            bar.update(1)
            bar.set_postfix(failed=failures)
            if queue:
                futures[pool.submit(_time_one, queue.pop(0), job, secret, slot, Path(tmp))] = slot
    bar.close()
    return path, data


def default_path(job: BaselineJob, hardware: HardwareInfo) -> Path:
    """Where the eval looks for it: one file per hardware, problem source and precision
    (the problems of one job come from one source)."""
    return baseline_path(job.results_dir, hardware.slug, job.precision, job.mode,
                         source=job.problems[0].source)


def _done(data: BaselineFile, key: str, retry_failed: bool) -> bool:
    record = data.records.get(key)
    return record is not None and (record.status == "ok" or not retry_failed)


def _open_file(path: Path, job: BaselineJob, hardware: HardwareInfo) -> BaselineFile:
    """Continue an existing file only if it was made under the same conditions."""
    producer = Producer(tool="kb_eval.baseline").continuing(None)
    fresh = BaselineFile(produced_by=producer, hardware=hardware,
                         precision=job.precision, timing=job.timing, mode=job.mode)
    if not path.exists():
        return fresh
    old = read_model(path, BaselineFile)
    differs = [name for name, a, b in (
        ("timing settings", old.timing, job.timing),
        ("hardware", old.hardware.name, hardware.name),
        ("torch version", old.hardware.torch_version, hardware.torch_version),
        ("precision", old.precision, job.precision), ("mode", old.mode, job.mode)) if a != b]
    if differs and not job.force:
        raise UserError(f"{path} was made with different {', '.join(differs)}; "
                        f"use --force to replace it or --output for another file")
    if differs:
        return fresh
    old.produced_by = fresh.produced_by.continuing(old.produced_by)
    return old


def child_env(device: str, gpus: list[int]) -> dict[str, str]:
    """A baseline child's environment. On a GPU it starts off the timing cores, as the
    eval's children do: the next problem's spare child imports torch (seconds of CPU)
    while this one times, and must not do it on the core a launch-bound reference
    launches from (on the H100, level1/71 moved 44.7 % between passes before, 2.2 %
    after)."""
    if device == "cpu":
        return {**TIMED_PROCESS_ENV, "CUDA_VISIBLE_DEVICES": ""}
    return {**TIMED_PROCESS_ENV, "CUDA_VISIBLE_DEVICES": device,
            **pinning.untimed_env([str(g) for g in gpus] or ["0"])}


def _time_one(problem: Problem, job: BaselineJob, secret: int, gpu: int | None,
              tmp: Path) -> BaselineRecord:
    device = "cpu" if job.device == "cpu" else str(gpu if gpu is not None else 0)
    env = child_env(device, job.gpus)
    payload = {"code": problem.code, "precision": job.precision, "mode": job.mode,
               "timing": job.timing.model_dump(), "secret": secret,
               "device": "cpu" if job.device == "cpu" else "cuda:0",
               # launched from the core the eval's pairing uses for this GPU: a launch-
               # bound reference is timed at the same host speed in every pass and eval
               "core": pinning.core_for(device)}
    workdir = tmp / f"{problem.slug}_{os.getpid()}_{gpu}"
    outcome = run_isolated(TASK, payload, workdir=workdir, timeout_s=job.timeout_s,
                           mem_limit_mb=job.mem_limit_mb, env=env, prewarm=True)
    base = dict(key=problem.key, source=problem.source, level=problem.level,
                problem_id=problem.problem_id, name=problem.name, wall_s=outcome.wall_s)
    if outcome.ok:
        result = outcome.result
        return BaselineRecord(**base, status="ok", timing=result["timing"],
                              peak_mem_bytes=result.get("peak_mem_bytes"),
                              compiler=result.get("compiler"), gpu=result.get("gpu"),
                              core=result.get("core"))
    return BaselineRecord(**base, status=outcome.status, error=outcome.describe(),
                          output_tail=outcome.output_tail[-2000:] or None)
