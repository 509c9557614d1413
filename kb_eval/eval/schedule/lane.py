"""One device lane's work on one built sample, wherever the lane runs: a thread of the
local pool (pool.py) or a Ray actor (ray_lane.py). Both call these, so a sample is judged
by the same code whichever executor runs it."""

from __future__ import annotations

import shutil
import sys
import traceback

from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.overlap import DeviceSlots
from kb_eval.eval.schedule.retry import evaluate_sample
from kb_eval.eval.schedule.sample import SampleTask, finish, new_record
from kb_eval.results import SampleRecord


def evaluate_guarded(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                     device: str, slots: DeviceSlots | None = None) -> SampleRecord:
    """Evaluate on `device` (`slots`: its samples in flight, overlap.py). An exception
    of ours while evaluating: once more from the start (a passing fault), then the
    sample's `eval_error` record; the run goes on either way."""
    for attempt in (1, 2):
        try:
            record = evaluate_sample(ctx, refs, task, device, slots)
            if attempt == 2:
                record.retried = record.retried or "an exception in the evaluator"
            return record
        except Exception:  # noqa: BLE001 - our bug: record it, keep going
            if attempt == 2:
                return internal_error(ctx, task)
            task.laps.restart()
    raise AssertionError("unreachable")


def internal_error(ctx: EvalContext, task: SampleTask, text: str | None = None) -> SampleRecord:
    """The `eval_error` record of a sample that a bug of ours stopped (call it in the
    `except` block: the traceback being handled is the record's detail)."""
    text = text or traceback.format_exc()
    print(f"kb_eval.eval: internal error on {task.problem.key} sample {task.sample}:\n"
          f"{text}", file=sys.stderr)
    record = new_record(ctx, task)
    if task.build is not None:
        record.build = task.build.info
    record.status, record.error = "eval_error", text.strip().splitlines()[-1][:300]
    record.detail = text[-4000:]
    return finish(record, task)


def clean_up(ctx: EvalContext, task: SampleTask) -> None:
    """A finished sample's scratch folders (its work folder unless kept for debugging;
    its in-memory run folder always: that is RAM)."""
    if not ctx.config.keep_workdirs:
        shutil.rmtree(task.workdir, ignore_errors=True)
    if task.scratch is not None:
        shutil.rmtree(task.scratch, ignore_errors=True)
