"""Time every selected reference, each in its own child process, into one baseline file
per hardware, precision and mode. A problem may be timed in `visits` children, its trials
split between them, so its calls spread over the run and over processes
(docs/GUARANTEES.md). The file is rewritten after every visit: `--resume` loses nothing."""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.eval.schedule import pinning
from kb_eval.isolation import run_isolated
from kb_eval.isolation.procs import resume_starts, stop_all
from kb_eval.peaks import PeaksFile, measure, peaks_path, read_peaks, write_peaks
from kb_eval.problems import Problem
from kb_eval.progress import ProgressBar
from kb_eval.results import (BaselineFile, BaselineRecord, BaselineVisit, HardwareInfo,
                             Producer, baseline_path, now_iso, read_model, write_json_atomic)
from kb_eval.timing import TIMED_PROCESS_ENV, TimingSettings, TimingStats

TASK = "kb_eval.baseline.task:time_reference"
PEAKS_TASK = "kb_eval.peaks:measure_task"
PARTIAL = "partial"  # a record some of whose visits are still to come


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
    visits: int = 1
    host_wait_s: float = 0.0  # how long a launch-heavy problem may wait for the host's full pace
    resume: bool = False
    retry_failed: bool = False
    force: bool = False
    output: Path | None = None


def run_baseline(job: BaselineJob, progress: bool = True) -> tuple[Path, BaselineFile]:
    resume_starts()  # an earlier run of this process may have stopped them
    hardware = HardwareInfo.detect(job.device)
    path = job.output or default_path(job, hardware)
    data = _open_file(path, job, hardware)
    queue = _visits_to_make(data, job)
    skipped = len(job.problems) - len({p.key for p, _ in queue})
    if skipped:
        print(f"resume: {skipped} problem(s) already in {path}, "
              f"{len(job.problems) - skipped} to time")
    write_json_atomic(path, data)
    ensure_peaks(job.results_dir, job.device, (job.gpus or [None])[0])  # first need
    secret = secrets.randbits(63)
    bar = ProgressBar(total=len(queue), desc=f"baseline {job.precision} {job.mode}",
                      unit="visit", disable=not progress)
    with tempfile.TemporaryDirectory(prefix="kb_baseline_") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, len(job.gpus))) as pool:
        try:
            _visit_all(pool, queue, job, data, path, secret, Path(tmp), bar)
        except KeyboardInterrupt:  # kill the running children so that the pool ends now
            stop_all()
            raise
    bar.close()
    return path, data


def _visit_all(pool: ThreadPoolExecutor, queue: list, job: BaselineJob, data: BaselineFile,
               path: Path, secret: int, tmp: Path, bar) -> None:
    """Time every visit of `queue`, one child per GPU at a time, writing `path` after each."""
    free, futures, failures = list(job.gpus) or [None], {}, 0
    host_best: dict[int | None, float] = {}  # fastest host probe per GPU's core
    while queue or futures:
        # the next visit of a problem none of whose visits is running (several GPUs)
        busy = {p.key for p, _ in futures.values()}
        while free and (ready := [x for x in queue if x[0].key not in busy]):
            item = ready[0]
            queue.remove(item)
            busy.add(item[0].key)
            gpu = free.pop()
            futures[pool.submit(_time_one, *item, job, secret, gpu, host_best.get(gpu),
                                tmp)] = item
        done = next(as_completed(futures))
        problem, visit = futures.pop(done)
        outcome, gpu = done.result()
        free.append(gpu)
        if outcome.ok and outcome.result.get("host_best_ms"):
            host_best[gpu] = min(host_best.get(gpu, float("inf")),
                                 outcome.result["host_best_ms"])
        record = _merge(data.records.get(problem.key), problem, visit, outcome, job)
        data.records[problem.key] = record
        data.updated = now_iso()
        write_json_atomic(path, data)
        if record.status not in ("ok", PARTIAL):
            failures += 1
            left = [x for x in queue if x[0].key == problem.key]
            queue = [x for x in queue if x[0].key != problem.key]
            bar.update(len(left))  # its later visits are not made
        bar.update(1)
        bar.set_postfix(failed=failures)


def ensure_peaks(results_dir: Path, device: str, gpu: int | None = None,
                 again: bool = False, here: bool = False) -> PeaksFile:
    """The machine's peaks file (kb_eval/peaks.py), measured when it is missing, made
    elsewhere, or `again` is asked: in a fresh child on `gpu`, or in this process when
    `here` (a CPU eval does, so no child's start competes for the cores)."""
    hardware = HardwareInfo.detect(device)
    known = None if again else read_peaks(peaks_path(results_dir, hardware.slug), hardware)
    if known is not None:
        return known
    if here:
        print("kb_eval: measuring this machine's peaks once, before the builds start",
              file=sys.stderr, flush=True)
        return write_peaks(results_dir, measure(device), hardware)
    env = child_env("cpu" if device == "cpu" else str(gpu or 0), [gpu or 0])
    with tempfile.TemporaryDirectory(prefix="kb_peaks_") as tmp:
        outcome = run_isolated(PEAKS_TASK, {"device": "cpu" if device == "cpu" else "cuda:0"},
                               workdir=Path(tmp), timeout_s=600, env=env)
    if not outcome.ok:
        raise UserError(f"measuring the peaks of {hardware.name} failed: "
                        f"{outcome.describe()}")
    return write_peaks(results_dir, outcome.result, hardware)


def visit_trials(trials: int, visits: int, visit: int) -> int:
    """The timed calls of one visit: `trials` split evenly, the first visits taking one more."""
    return trials // visits + (1 if visit < trials % visits else 0)


def _visits_to_make(data: BaselineFile, job: BaselineJob) -> list[tuple[Problem, int]]:
    """(problem, visit) in the order they run: every problem's first visit, then every
    second, ..., so that one problem's visits are a whole sweep apart. A resumed run makes
    only the visits still lacking."""
    first: dict[str, int] = {}
    for p in job.problems:
        record = data.records.get(p.key)
        if not job.resume or record is None:
            first[p.key] = 0
        elif record.status == PARTIAL:
            first[p.key] = len(record.visits)
        elif not _done(data, p.key, job.retry_failed):
            first[p.key] = 0
    return [(p, v) for v in range(job.visits) for p in job.problems
            if p.key in first and v >= first[p.key]]


def default_path(job: BaselineJob, hardware: HardwareInfo) -> Path:
    """Where the eval looks for it: one file per hardware, source, precision and mode."""
    return baseline_path(job.results_dir, hardware.slug, job.precision, job.mode,
                         source=job.problems[0].source)


def _done(data: BaselineFile, key: str, retry_failed: bool) -> bool:
    record = data.records.get(key)
    return record is not None and (record.status == "ok" or not retry_failed)


def _open_file(path: Path, job: BaselineJob, hardware: HardwareInfo) -> BaselineFile:
    """Continue an existing file only if it was made under the same conditions."""
    producer = Producer(tool="kb_eval.baseline").continuing(None)
    fresh = BaselineFile(produced_by=producer, hardware=hardware, precision=job.precision,
                         timing=job.timing, mode=job.mode, visits=job.visits)
    if not path.exists():
        return fresh
    old = read_model(path, BaselineFile)
    differs = [name for name, a, b in (
        ("timing settings", old.timing, job.timing),
        ("hardware", old.hardware.name, hardware.name),
        ("torch version", old.hardware.torch_version, hardware.torch_version),
        ("precision", old.precision, job.precision), ("mode", old.mode, job.mode),
        (f"visits ({old.visits} there, --visits {job.visits} now)", old.visits, job.visits))
        if a != b]
    if differs and not job.force:
        raise UserError(f"{path} was made with different {', '.join(differs)}; "
                        f"use --force to replace it or --output for another file")
    if differs:
        return fresh
    old.produced_by = fresh.produced_by.continuing(old.produced_by)
    return old


def child_env(device: str, gpus: list[int]) -> dict[str, str]:
    """A baseline child's environment. On a GPU it starts off the timing cores, so that a
    spare child importing torch does not slow the core a reference launches from."""
    if device == "cpu":
        return {**TIMED_PROCESS_ENV, "CUDA_VISIBLE_DEVICES": ""}
    return {**TIMED_PROCESS_ENV, "CUDA_VISIBLE_DEVICES": device,
            **pinning.untimed_env([str(g) for g in gpus] or ["0"])}


def _time_one(problem: Problem, visit: int, job: BaselineJob, secret: int,
              gpu: int | None, host_best_ms: float | None, tmp: Path):
    """One visit of `problem` in a fresh child on `gpu`: (its outcome, the gpu). A
    launch-heavy problem is retimed for up to `job.host_wait_s` until the host shows its
    full pace (host_state.timed_at_full_pace)."""
    device = "cpu" if job.device == "cpu" else str(gpu if gpu is not None else 0)
    env = child_env(device, job.gpus)
    timing = job.timing.model_copy(
        update={"trials": visit_trials(job.timing.trials, job.visits, visit)})
    payload = {"code": problem.code, "precision": job.precision, "mode": job.mode,
               "timing": timing.model_dump(), "secret": secret, "visit": visit,
               "device": "cpu" if job.device == "cpu" else "cuda:0",
               # the core the eval uses for this GPU: the same host speed in both
               "core": pinning.core_for(device),
               "host_pace": {"best_ms": host_best_ms, "wait_s": job.host_wait_s}}
    workdir = tmp / f"{problem.slug}_{visit}_{os.getpid()}_{gpu}"
    outcome = run_isolated(TASK, payload, workdir=workdir,
                           timeout_s=job.timeout_s + job.host_wait_s,
                           mem_limit_mb=job.mem_limit_mb, env=env, prewarm=True)
    return outcome, gpu


def _merge(record: BaselineRecord | None, problem: Problem, visit: int, outcome,
           job: BaselineJob) -> BaselineRecord:
    """The problem's record once `visit` came back: a failed visit fails the problem; an
    ok one joins the visits before it, `timing` covering all of their calls."""
    base = dict(key=problem.key, source=problem.source, level=problem.level,
                problem_id=problem.problem_id, name=problem.name)
    earlier = record.visits if record is not None and visit > 0 else []
    wall = sum(v.wall_s or 0.0 for v in earlier) + outcome.wall_s
    if not outcome.ok:
        return BaselineRecord(**base, wall_s=wall, status=outcome.status,
                              error=outcome.describe(),
                              output_tail=outcome.output_tail[-2000:] or None)
    result = outcome.result
    visits = [*earlier, BaselineVisit(samples_ms=result["samples_ms"],
                                      launch_ms=result.get("launch_ms"),
                                      wall_s=outcome.wall_s, gpu=result.get("gpu"),
                                      host_work_ms=result.get("host_work_ms"),
                                      launch_pace_ms=result.get("launch_pace_ms"),
                                      host_tries=result.get("host_tries"),
                                      host_full_pace=result.get("host_full_pace"))]
    launches = [v.launch_ms for v in visits if v.launch_ms is not None]
    timing = TimingStats.of([x for v in visits for x in v.samples_ms],
                            statistics.median(launches) if launches else None)
    peaks = [x for x in (record.peak_mem_bytes if earlier else None,
                         result.get("peak_mem_bytes")) if x is not None]
    return BaselineRecord(**base, wall_s=wall, timing=timing, visits=visits,
                          status="ok" if len(visits) == job.visits else PARTIAL,
                          peak_mem_bytes=max(peaks) if peaks else None,
                          compiler=result.get("compiler"), gpu=result.get("gpu"),
                          core=result.get("core"), host_work_ms=result.get("host_work_ms"),
                          work=result.get("work"))
