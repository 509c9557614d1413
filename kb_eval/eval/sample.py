"""One sample from built to judged: run the candidate child on a device, make sure the
reference outputs it needs exist, compare in this process, apply the guards, and fill in
its SampleRecord."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kb_eval.eval.build import BuildOutcome, crash_info, source_sha256, status_of
from kb_eval.eval.context import EvalContext
from kb_eval.eval.correctness import check_labels, read_outputs, tolerances
from kb_eval.eval.guards import judge
from kb_eval.eval.references import ReferenceState, ReferenceStore, ReferenceTampered
from kb_eval.isolation import ChildOutcome, run_isolated
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo, Flag, SampleRecord
from kb_eval.timing import TimingStats


TIMED_LABEL = re.compile(r"timing_(\d+)")


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
        record.status = status_of(b.crash)
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
    record.status = status_of(crash)
    record.error = f"{phase}: {out.describe()}"
    record.detail = out.output_tail[-4000:] or None


def evaluate_sample(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                    device: str) -> SampleRecord | Callable[[], SampleRecord]:
    """The device's part: run the candidate child, then make sure the reference outputs
    exist. Returns the finished record, or (when there are outputs to compare) a function
    that compares them and finishes it: CPU work the device need not wait for."""
    cfg = ctx.config
    record = new_record(ctx, task)
    record.build = task.build.info
    run_dir = task.workdir / "run"
    payload = {"problem_code": task.problem.code, "source": task.source,
               "extensions_dir": task.build.extensions_dir,
               "device": ctx.torch_device(device), "precision": cfg.precision,
               "seed": ctx.problem_seed(task.problem), "correct_trials": cfg.correct_trials,
               "timing": cfg.timing.model_dump(), "recheck_timed": cfg.recheck_timed}
    window = _WINDOWS.begin()
    out = run_isolated("kb_eval.eval.worker:run_candidate", payload, workdir=run_dir,
                       timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                       env=ctx.device_env(device), prewarm=True)
    _check_vandalism(refs, record, alone=_WINDOWS.end(window))
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
    labels = labels_to_check(cfg, result.get("saved"))
    ref, ref_bytes = _reference_bytes(refs, task.problem, labels, device)
    if ref.error:
        record.status, record.error, record.detail = "reference_error", ref.error, ref.detail
        record.crash = ref.crash
        return finish(record, task)
    # Read now, while no candidate runs on this device: nothing can change them later.
    cap = 4 * max(len(b) for b in ref_bytes.values()) + (1 << 20)
    cand_bytes = read_outputs(run_dir, labels, cap)
    return lambda: finish(_judge(ctx, task, record, result, labels, ref, cand_bytes,
                                 ref_bytes), task)


class _Windows:
    """Whether a candidate child ran alone (no other candidate child overlapping it), so
    a change to the reference files can be pinned on it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = self.started = 0

    def begin(self) -> tuple[int, int]:
        with self.lock:
            self.running += 1
            self.started += 1
            return self.started, self.running

    def end(self, window: tuple[int, int]) -> bool:
        with self.lock:
            self.running -= 1
            return window[1] == 1 and self.started == window[0]


_WINDOWS = _Windows()


def _check_vandalism(refs: ReferenceStore, record: SampleRecord, alone: bool) -> None:
    """Reference files changed while this candidate ran: flag it, recompute them."""
    moved = refs.changed()
    for key in moved:
        refs.invalidate(key)
    if moved:
        record.flags.append(Flag(
            code="tampered_files", severity="error" if alone else "warning",
            message=f"reference outputs of {', '.join(moved[:3])} changed on disk while "
                    f"this candidate ran" + ("" if alone else " (with other candidates)")))


def _reference_bytes(refs: ReferenceStore, problem: Problem, labels: list[str],
                     device: str) -> tuple[ReferenceState, dict[str, bytes]]:
    """The reference's outputs, verified; recomputed once if they were tampered with."""
    for attempt in (1, 2):
        ref = refs.ensure(problem, labels, device)
        if ref.error:
            return ref, {}
        try:
            return ref, refs.read(problem, labels)
        except ReferenceTampered:
            if attempt == 2:
                raise
            refs.invalidate(problem.key)
    raise AssertionError("unreachable")


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


def labels_to_check(cfg, saved: object) -> list[str]:
    """Every correctness trial (decided here, not by the child), plus the re-checked timed
    calls the child reports, if well-formed and no more than were asked for."""
    n_calls = cfg.timing.trials + (1 if cfg.timing.discard_first else 0)
    timed = sorted({s for s in (saved if isinstance(saved, list) else [])
                    if isinstance(s, str) and (m := TIMED_LABEL.fullmatch(s))
                    and int(m.group(1)) < n_calls})
    return [f"correct_{i}" for i in range(cfg.correct_trials)] + timed[:cfg.recheck_timed]


def _judge(ctx: EvalContext, task: SampleTask, record: SampleRecord, result: dict,
           labels: list[str], ref: ReferenceState, cand_bytes: dict,
           ref_bytes: dict[str, bytes]) -> SampleRecord:
    """Compare in this process, apply the guards, derive the speedup."""
    atol, rtol = tolerances(ctx.config.precision, ctx.config.atol, ctx.config.rtol)
    record.correctness = check_labels(labels, cand_bytes, ref_bytes, atol, rtol)
    seen = result.get("seen") if isinstance(result.get("seen"), dict) else {}
    record.flags.extend(judge({lb: seen[lb] for lb in labels if isinstance(seen.get(lb), dict)},
                              ref.seen))
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
