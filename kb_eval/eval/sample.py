"""One sample from built to judged: run the candidate child on a device, make sure the
reference outputs it needs exist, compare in this process, apply the guards, and fill in
its SampleRecord."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.build import BuildOutcome, crash_info, source_sha256
from kb_eval.eval.context import EvalContext
from kb_eval.eval.correctness import check_labels, tolerances
from kb_eval.eval.guards import judge
from kb_eval.eval.references import ReferenceStore
from kb_eval.isolation import ChildOutcome, run_isolated
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo, Flag, SampleRecord
from kb_eval.timing import TimingStats


@dataclass
class SampleTask:
    problem: Problem
    sample: int
    turn: int
    source: str
    workdir: Path
    started: float = field(default_factory=time.monotonic)
    build: BuildOutcome | None = None


def new_record(ctx: EvalContext, task: SampleTask) -> SampleRecord:
    p = task.problem
    return SampleRecord(key=p.key, sample=task.sample, turn=task.turn, source=p.source,
                        level=p.level, problem_id=p.problem_id, name=p.name,
                        backend=ctx.backend, precision=ctx.config.precision,
                        source_sha256=source_sha256(task.source))


def finish(record: SampleRecord, task: SampleTask) -> SampleRecord:
    record.wall_s = round(time.monotonic() - task.started, 3)
    return record


def record_build_failure(ctx: EvalContext, task: SampleTask) -> SampleRecord:
    """A sample whose build said no: compile error, or a build child that died."""
    record, b = new_record(ctx, task), task.build
    record.build = b.info
    record.error, record.detail = b.error, b.detail
    if b.crash is not None:
        record.status = b.crash.kind if b.crash.kind in ("timeout", "oom", "output_flood") else "crashed"
        record.crash = b.crash
    else:
        record.status = "compile_error"
    return finish(record, task)


def _phase(workdir: Path) -> str:
    try:
        return (workdir / "phase").read_text().strip() or "run"
    except OSError:
        return "run"


def _crashed(record: SampleRecord, out: ChildOutcome, phase: str) -> None:
    crash = crash_info(phase, out)
    record.crash = crash
    record.status = crash.kind if crash.kind in ("timeout", "oom", "output_flood") else "crashed"
    record.error = f"{phase}: {out.describe()}"
    record.detail = out.output_tail[-4000:] or None


def evaluate_sample(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                    device: str) -> SampleRecord:
    cfg = ctx.config
    record = new_record(ctx, task)
    record.build = task.build.info
    run_dir = task.workdir / "run"
    payload = {"problem_code": task.problem.code, "source": task.source,
               "extensions_dir": task.build.extensions_dir,
               "device": ctx.torch_device(device), "precision": cfg.precision,
               "seed": ctx.problem_seed(task.problem), "correct_trials": cfg.correct_trials,
               "timing": cfg.timing.model_dump(), "recheck_timed": cfg.recheck_timed}
    out = run_isolated("kb_eval.eval.worker:run_candidate", payload, workdir=run_dir,
                       timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                       env=ctx.device_env(device), prewarm=True)
    record.compiled = task.build.info.status == "ok"
    if not out.ok:
        phase = _phase(run_dir)
        record.compiled = record.compiled or phase not in ("setup", "load")
        _crashed(record, out, phase)
        return finish(record, task)
    result = out.result or {}
    record.compiled = result.get("status") != "compile_error"
    if result.get("status") != "ok":
        return finish(_child_failure(record, result), task)
    return finish(_judge(ctx, refs, task, record, result, device), task)


def _child_failure(record: SampleRecord, result: dict) -> SampleRecord:
    status, phase = result.get("status"), result.get("phase", "run")
    record.error, record.detail = result.get("error"), result.get("detail")
    if status == "cuda_error":
        record.status = "crashed"
        record.crash = CrashInfo(phase=phase, kind="cuda_error", output_tail=record.detail or "")
    elif result.get("output_type"):
        record.status = "incorrect"
    else:
        record.status = status or "runtime_error"
    return record


def _judge(ctx: EvalContext, refs: ReferenceStore, task: SampleTask, record: SampleRecord,
           result: dict, device: str) -> SampleRecord:
    labels = list(result.get("saved", []))
    ref = refs.ensure(task.problem, labels, device)
    if ref.error:
        record.status, record.error, record.detail = "reference_error", ref.error, ref.detail
        record.crash = ref.crash
        return record
    atol, rtol = tolerances(ctx.config.precision, ctx.config.atol, ctx.config.rtol)
    record.correctness = check_labels(labels, task.workdir / "run", ref.folder, atol, rtol)
    record.flags.extend(judge(result.get("seen", {}), ref.seen))
    passed = record.correctness.passed == record.correctness.trials > 0
    record.correct = passed and not any(f.severity == "error" for f in record.flags)
    record.status = "correct" if record.correct else "incorrect"
    if not record.correct:
        reasons = record.correctness.failures[:1] + [f.message for f in record.flags
                                                      if f.severity == "error"][:1]
        record.error = "; ".join(reasons) or "outputs differ from the reference"
    if result.get("timing"):
        record.timing = TimingStats.model_validate(result["timing"])
    if ctx.config.live_baseline:
        record.baseline, record.baseline_source = ref.timing, "live"
    else:
        record.baseline, record.baseline_source = ctx.baseline_for(task.problem), "file"
        if record.baseline is None:
            record.flags.append(Flag(code="no_baseline", message=f"{ctx.baseline_file} has "
                                     f"no timing for {task.problem.key}: no speedup"))
    if record.correct and record.timing and record.baseline and record.timing.median > 0:
        record.speedup = record.baseline.median / record.timing.median
    return record
