"""Whose fault a failure is. A sample is evaluated once more when its first try failed
for a reason that may be the evaluator's; a fault that persists is `eval_error`, never
the candidate's. The memory plan runs first: a problem that cannot fit is `too_large`."""

from __future__ import annotations

from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.memplan import MemoryPlan
from kb_eval.eval.judge.verdict import trials_for
from kb_eval.eval.schedule.build import BuildOutcome
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.exchange import exchange_bytes
from kb_eval.eval.schedule.overlap import Charge, DeviceSlots
from kb_eval.eval.schedule.sample import SampleTask, evaluate_once, finish, new_record
from kb_eval.problems import reference_copy
from kb_eval.results import BuildInfo, SampleRecord


def evaluate_sample(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                    device: str, slots: DeviceSlots | None = None) -> SampleRecord:
    """On one device: check the memory plan, evaluate, and evaluate once more when the
    first try failed for a reason that may be the evaluator's (a fault persisting on the
    retry is `eval_error`, never the candidate's). Returns the finished record. `slots`:
    the device's samples in flight (overlap.py); a large problem takes several, or all."""
    task.laps.lap("wait")
    plan = refs.plan(task.problem, device, ctx.baseline_peak(task.problem))
    task.laps.lap("plan")  # the memory plan's own cost (the reference server's sizes)
    if not plan.fits:
        return finish(unjudged(ctx, task, "too_large", plan.reason, plan), task)
    task.correct_trials = trials_for(ctx.config.correct_trials, plan.out_bytes)
    task.timing = refs.sample_timing(task.problem, device)
    task.reference_call_ms, task.reference_launch_ms = refs.pace(task.problem)
    task.laps.lap("estimate")  # the reference's call time, once per problem
    task.out_bytes = plan.out_bytes
    task.exchange_bytes = exchange_bytes(ctx, plan, task.correct_trials, device)
    if slots is None:
        return _evaluate_planned(ctx, refs, task, device, plan)
    # A sample's output buffers (exchange.py) are held beside its child: part of its need.
    with slots.held(Charge.of(plan.need_bytes, task.exchange_bytes, plan.truth_bytes,
                              plan.free_bytes)) as slot:
        task.laps.lap("wait_slot")
        task.slot = slot
        return _evaluate_planned(ctx, refs, task, device, plan)


def _evaluate_planned(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                      device: str, plan: MemoryPlan) -> SampleRecord:
    record = evaluate_once(ctx, refs, task, device)
    record.memory.update(reference_need=plan.need_bytes, free=plan.free_bytes)
    why = harness_suspect(record)
    if why is None:
        return record
    if record.status == "oom" or _setup_oom(record):
        # the harness gives back all it can, then the candidate
        plan = refs.plan(task.problem, device, ctx.baseline_peak(task.problem), drop=True)
    task.laps.restart()
    retry = evaluate_once(ctx, refs, task, device)
    retry.retried = why
    if harness_suspect(retry) is None or retry.status == "oom":
        return finish(retry, task)  # the candidate's own verdict
    if _setup_failure(retry) and _control_sets_up(ctx, refs, task, device):
        if _setup_oom(retry):
            # Memory shared with the server and neighbours may have been short for the
            # candidate and enough for the control: one more try in the room the control
            # found; failing setup again there is the candidate's.
            retry = evaluate_once(ctx, refs, task, device)
            retry.retried = why
        return finish(retry, task)  # the reference copy got past setup: the candidate's
    detail = retry.detail
    retry = unjudged(ctx, task, "eval_error",
                     f"evaluator fault, also on the retry: {retry.error}", plan)
    retry.detail, retry.retried = detail, why
    return finish(retry, task)


def _setup_failure(record: SampleRecord) -> bool:
    return record.crash is not None and record.crash.phase == "setup"


def _setup_oom(record: SampleRecord) -> bool:
    """Out of device memory before the candidate's code loaded (the child says so: the
    control decides whether to believe it)."""
    return _setup_failure(record) and "OutOfMemoryError" in (record.error or "")


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
    if _setup_failure(record):
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
