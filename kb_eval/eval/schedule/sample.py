"""One sample from built to judged: run the candidate child on a device, then the
reference server, which compares the candidate's saved outputs with its own on the device;
apply the guards and rules here, and fill in its SampleRecord."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.eval.judge.crashes import crash_info, status_of
from kb_eval.eval.schedule.build import BuildOutcome, source_sha256
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.judge.correctness import info_from_diffs, tolerances
from kb_eval.eval.judge.guards import dedupe, judge
from kb_eval.eval.wire.labels import PROBE_LABEL, TIMED_LABEL
from kb_eval.eval.child.probes import recheck_count
from kb_eval.eval.schedule.reaper import sweep_escapees
from kb_eval.eval.judge.references import MemoryPlan, ReferenceRun, ReferenceStore
from kb_eval.eval.judge.rules import (child_flags, completeness, constant_reference,
                                physical_floor, shape_probe, timing_plausible)
from kb_eval.eval.judge.score import VOIDS_SPEEDUP
from kb_eval.eval.judge.static import static_flags
from kb_eval.eval.child.worker import BEFORE_PROBE, Laps
from kb_eval.isolation import ChildOutcome, run_isolated
from kb_eval.faults import inject_fault
from kb_eval.problems import Problem, reference_copy
from kb_eval.results import BuildInfo, CrashInfo, Flag, SampleRecord
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
    laps: Laps = field(default_factory=Laps)
    correct_trials: int | None = None  # set by the memory plan (large outputs: fewer)
    out_bytes: int | None = None  # one call's outputs, from the plan
    scratch: Path | None = None  # the candidate's run folder when it is not in workdir


def new_record(ctx: EvalContext, task: SampleTask) -> SampleRecord:
    p = task.problem
    return SampleRecord(key=p.key, sample=task.sample, turn=task.turn, source=p.source,
                        level=p.level, problem_id=p.problem_id, name=p.name,
                        backend=ctx.backend, precision=ctx.config.precision,
                        source_sha256=source_sha256(task.source))


def finish(record: SampleRecord, task: SampleTask) -> SampleRecord:
    record.wall_s = round(time.monotonic() - task.started, 3)
    record.phases = dict(task.laps.seconds)
    return record


def record_build_failure(ctx: EvalContext, task: SampleTask) -> SampleRecord:
    """A sample whose build said no: compile error, or a build child that died."""
    record, b = new_record(ctx, task), task.build
    record.build = b.info
    record.error, record.detail = b.error, b.detail
    if getattr(b, "harness_error", None):  # our toolchain failed: no verdict
        record.status, record.error = "eval_error", f"build: {b.harness_error}"
    elif b.crash is not None:
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
                    device: str) -> SampleRecord:
    """On one device: check the memory plan, evaluate, and evaluate once more when the
    first try failed for a reason that may be the evaluator's (a fault persisting on the
    retry is `eval_error`, never the candidate's). Returns the finished record."""
    task.laps.lap("wait")
    plan = refs.plan(task.problem, device, ctx.baseline_peak(task.problem))
    if not plan.fits:
        return finish(unjudged(ctx, task, "too_large", plan.reason, plan), task)
    task.correct_trials = trials_for(ctx.config.correct_trials, plan.out_bytes)
    task.out_bytes = plan.out_bytes
    record = evaluate_once(ctx, refs, task, device)
    record.memory.update(reference_need=plan.need_bytes, free=plan.free_bytes)
    why = harness_suspect(record)
    if why is None:
        return record
    if record.status == "oom":  # the harness gives back all it can, then the candidate
        plan = refs.plan(task.problem, device, ctx.baseline_peak(task.problem), drop=True)
    task.laps.restart()
    retry = evaluate_once(ctx, refs, task, device)
    retry.retried = why
    if harness_suspect(retry) is None or retry.status == "oom":
        return finish(retry, task)  # the candidate's own verdict
    if _setup_failure(retry) and _control_sets_up(ctx, refs, task, device):
        return finish(retry, task)  # the reference copy got past setup: the candidate's
    detail = retry.detail
    retry = unjudged(ctx, task, "eval_error",
                     f"evaluator fault, also on the retry: {retry.error}", plan)
    retry.detail, retry.retried = detail, why
    return finish(retry, task)


def _setup_failure(record: SampleRecord) -> bool:
    return record.crash is not None and record.crash.phase == "setup"


def _control_sets_up(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                     device: str) -> bool:
    """Whether the problem's own reference, run as the candidate the same way, gets past
    setup. The child reports its phase itself, so a candidate could claim to have died
    before its code loaded; the control decides whose fault it was."""
    control = SampleTask(problem=task.problem, sample=task.sample, turn=task.turn,
                         source=reference_copy(task.problem), workdir=task.workdir / "control")
    control.build = BuildOutcome(BuildInfo(cache_key="control", status="skipped"),
                                 str(task.workdir / "control" / "ext"))
    return not _setup_failure(evaluate_once(ctx, refs, control, device))


def harness_suspect(record: SampleRecord) -> str | None:
    """Why a failed record may be the evaluator's doing, or None: the candidate's child
    failed before the candidate's code loaded, the reference server died, the candidate
    ran out of memory (the harness may have held some), or our judging code raised."""
    if record.status in ("eval_error", "oom"):
        return f"{record.status}: {record.error}"
    if "No space left on device" in (record.error or "") + (record.detail or ""):
        return f"our scratch space ran out: {record.error}"
    if record.crash is not None and record.crash.phase == "setup":
        return f"the child failed before the candidate's code loaded: {record.error}"
    if record.status == "reference_error" and (
            record.crash is not None or "OutOfMemoryError" in (record.error or "")):
        return f"the reference server failed: {record.error}"
    return None


def unjudged(ctx: EvalContext, task: SampleTask, status: str, why: str | None,
             plan: MemoryPlan | None) -> SampleRecord:
    """A record with no verdict on the candidate (HARNESS_STATUSES)."""
    record = new_record(ctx, task)
    record.build = task.build.info if task.build else None
    record.compiled = bool(task.build and task.build.info.status == "ok")
    record.status, record.error = status, why
    if plan is not None:
        record.memory = {"reference_need": plan.need_bytes, "free": plan.free_bytes}
    return record


def evaluate_once(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                  device: str) -> SampleRecord:
    """The candidate child, then the reference server that compares its outputs; then
    the rules."""
    cfg = ctx.config
    record = new_record(ctx, task)
    record.build = task.build.info
    run_dir = run_folder(ctx, task)
    payload = {"problem_code": task.problem.code, "source": task.source,
               "extensions_dir": task.build.extensions_dir,
               "device": ctx.torch_device(device), "precision": cfg.precision,
               "seed": ctx.problem_seed(task.problem), "correct_trials": _trials(cfg, task),
               "timing": cfg.timing.model_dump(), "recheck_timed": cfg.recheck_timed}
    window = _WINDOWS.begin()
    out = run_isolated("kb_eval.eval.child.worker:run_candidate", payload, workdir=run_dir,
                       timeout_s=cfg.run_timeout_s, mem_limit_mb=cfg.mem_limit_mb,
                       env=ctx.device_env(device), prewarm=True,
                       warm_cuda=device != "cpu")
    alone = _WINDOWS.end(window)
    task.laps.lap("run")
    if sweep_escapees() and alone:
        record.flags.append(Flag(code="left_processes", severity="warning",
                                 message="processes that shed the sandbox marker outlived "
                                         "the candidate's child (killed)"))
    record.compiled = task.build.info.status == "ok"
    result = out.result or {}
    if not out.ok:
        phase = _phase(run_dir)
        result = _before_probe(run_dir) if phase == "probe" else None
        if result is None:
            record.compiled = record.compiled or phase not in ("setup", "load")
            _crashed(record, out, phase)
            return finish(record, task)
        result["probe_error"] = f"the call {out.describe()}"  # only the probe was lost
    record.compiled = result.get("status") != "compile_error"
    task.laps.seconds.update(_child_steps(result.get("steps")))
    if result.get("status") != "ok":
        return finish(_child_failure(record, result), task)
    labels = labels_to_check(cfg, result.get("saved"), _trials(cfg, task))
    probe = [PROBE_LABEL] if result.get("probe") == PROBE_LABEL else []
    ref = refs.compare(task.problem, labels + probe, run_dir, device)
    task.laps.lap("reference")
    if ref.error:
        record.status, record.error, record.detail = "reference_error", ref.error, ref.state.detail
        record.crash = ref.state.crash
        return finish(record, task)
    # A timed call the reference could not redo (a seed it refused) is not re-checked:
    # it then counts as missing (timed_recheck_missing).
    labels = [lb for lb in labels if lb in ref.diffs]
    inject_fault("judge_exception")
    _judge(ctx, task, record, result, labels, ref)
    metrics = ref.state.metrics or {}
    record.memory = {"reference_peak": metrics.get("peak_bytes"),
                     "candidate_peak": _int_or_none(result.get("peak_mem_bytes"))}
    record.reference_deterministic = metrics.get("deterministic")
    task.laps.lap("judge")
    return finish(record, task)


SHM = Path("/dev/shm")


def run_folder(ctx: EvalContext, task: SampleTask) -> Path:
    """Where the candidate's child writes its output files: in memory (/dev/shm) when
    they fit there with room to spare, else in the sample's folder on disk. A KernelBench
    problem with 6 GiB outputs writes 24 GiB of files per sample; on disk, writeback
    throttling made that ~20 s of the H100 lane's time per sample."""
    files = (task.out_bytes or 0) * (_trials(ctx.config, task) + ctx.config.recheck_timed + 1)
    try:
        roomy = SHM.is_dir() and shutil.disk_usage(SHM).free > files + (2 << 30)
    except OSError:
        roomy = False
    if not roomy or not task.out_bytes:
        return task.workdir / "run"
    task.scratch = SHM / f"kb_eval_{os.getpid()}" / task.workdir.name
    return task.scratch / "run"


def _int_or_none(x: object) -> int | None:
    return x if type(x) is int else None


def _child_steps(steps: object) -> dict[str, float]:
    """The candidate child's own account of its steps (diagnostics only: never trusted
    for anything that is scored)."""
    if not isinstance(steps, dict):
        return {}
    return {f"child_{k}": round(float(v), 3) for k, v in list(steps.items())[:8]
            if isinstance(k, str) and k.isidentifier() and isinstance(v, (int, float))}


def _before_probe(run_dir: Path) -> dict | None:
    """The result a child wrote before its shape probe, if the probe is what killed it."""
    try:
        result = json.loads((run_dir / BEFORE_PROBE).read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


class _Windows:
    """Whether a candidate child ran alone (no other candidate child overlapping it), so
    processes found outliving it can be pinned on it."""

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


def _child_failure(record: SampleRecord, result: dict) -> SampleRecord:
    status, phase = result.get("status"), result.get("phase", "run")
    record.error, record.detail = result.get("error"), result.get("detail")
    if status == "cuda_error":
        record.status = "crashed"
        record.crash = CrashInfo(phase=phase, kind="cuda_error", output_tail=record.detail or "")
    elif result.get("output_type"):
        record.status = "incorrect"
    else:  # the child's word: only statuses that blame the candidate are taken from it
        record.status = status if status in CHILD_STATUSES else "runtime_error"
    return record


CHILD_STATUSES = frozenset({"compile_error", "runtime_error", "oom"})


FILES_BUDGET = 16 << 30  # output files one sample writes for its correctness trials


def trials_for(asked: int, out_bytes: int | None) -> int:
    """Correctness trials for outputs of `out_bytes`: as asked, but their files (each
    trial's outputs go to disk for the reference server) within 16 GiB, and at least two.
    A KernelBench L1Norm writes 8 GiB per call: 5 trials, a re-checked timed call and the
    shape probe would write 56 GiB, most of the device machine's disk."""
    if not out_bytes:
        return asked
    return max(min(asked, 2), min(asked, FILES_BUDGET // out_bytes))


def _trials(cfg, task: SampleTask) -> int:
    return task.correct_trials or cfg.correct_trials


def labels_to_check(cfg, saved: object, correct_trials: int | None = None) -> list[str]:
    """Every correctness trial (decided here, not by the child), plus the re-checked timed
    calls the child reports, if well-formed, one per call, no more than were asked for."""
    n_calls = cfg.timing.trials + (1 if cfg.timing.discard_first else 0)
    by_call: dict[int, str] = {}
    for s in sorted(saved if isinstance(saved, list) else [], key=str):
        if (isinstance(s, str) and (m := TIMED_LABEL.fullmatch(s)) and int(m.group(1)) < n_calls
                and int(m.group(2), 16) < 2 ** 63):
            by_call.setdefault(int(m.group(1)), s)
    timed = [by_call[i] for i in sorted(by_call)]
    n = correct_trials or cfg.correct_trials
    return [f"correct_{i}" for i in range(n)] + timed[:cfg.recheck_timed]


def expected_rechecks(cfg, metrics: dict | None) -> int:
    n_calls = cfg.timing.trials + (1 if cfg.timing.discard_first else 0)
    return recheck_count(cfg.recheck_timed, n_calls, (metrics or {}).get("out_bytes"))


def _judge(ctx: EvalContext, task: SampleTask, record: SampleRecord, result: dict,
           labels: list[str], ref: ReferenceRun) -> SampleRecord:
    """Add up the comparisons, apply the guards and rules, derive the speedup."""
    cfg = ctx.config
    atol, rtol = tolerances(cfg.precision, cfg.atol, cfg.rtol)
    record.correctness = info_from_diffs(labels, ref.diffs, atol, rtol)
    seen = result.get("seen") if isinstance(result.get("seen"), dict) else {}
    record.flags.extend(judge({lb: seen[lb] for lb in labels if isinstance(seen.get(lb), dict)},
                              ref.seen))
    record.flags.extend(child_flags(result))
    timed = [lb for lb in labels if TIMED_LABEL.fullmatch(lb)]
    record.flags.extend(completeness(expected_rechecks(cfg, ref.state.metrics), timed,
                                     bool(result.get("timing"))))
    record.flags.extend(timing_plausible(result.get("timing"), cfg.timing.trials))
    if result.get("timing") and not any(f.code == "implausible_timing" for f in record.flags):
        record.timing = TimingStats.model_validate(result["timing"])
        record.flags.extend(physical_floor(record.timing.median, ref.state.metrics, ctx.device_kind,
                                           ctx.hardware.name, cfg.timing.flush_l2))
    passed = record.correctness.passed == record.correctness.trials > 0
    record.correct = passed and not any(f.severity == "error" for f in record.flags)
    record.status = "correct" if record.correct else "incorrect"
    if record.correct:  # findings that matter only for a sample that counts
        record.flags.extend(static_flags(task.source))
        record.flags.extend(constant_reference(ref.seen, labels[:_trials(cfg, task)]))
        record.flags.extend(_probe_flags(result, ref.diffs))
    else:
        reasons = record.correctness.failures[:1] + [f.message for f in record.flags
                                                      if f.severity == "error"][:1]
        record.error = "; ".join(reasons) or "outputs differ from the reference"
    if cfg.live_baseline:
        record.baseline, record.baseline_source = ref.state.timing, "live"
    else:
        record.baseline, record.baseline_source = ctx.baseline_for(task.problem), "file"
        if record.baseline is None:
            record.flags.append(Flag(code="no_baseline", message=f"{ctx.baseline_file} has "
                                     f"no timing for {task.problem.key}: no speedup"))
    if record.correct and record.timing and record.baseline and record.timing.median > 0:
        record.speedup = record.baseline.median / record.timing.median
    record.flags = dedupe(record.flags)
    record.speedup_counted = record.speedup is not None and not any(
        f.code in VOIDS_SPEEDUP for f in record.flags)
    return record


def _probe_flags(result: dict, diffs: dict[str, dict]) -> list[Flag]:
    """The answer on a batch one smaller: wrong without an error means the candidate holds
    only for the problem's own sizes (refusing other sizes with an error is fine)."""
    d = diffs.get(PROBE_LABEL)
    if d is None or result.get("probe") != PROBE_LABEL:
        return []
    return shape_probe(None if d.get("ok") else d.get("error"),
                       "a batch one smaller than the problem's")
