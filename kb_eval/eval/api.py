"""The evaluation API (the run stage and the CLI both use it).

    records = evaluate(pairs, EvalConfig(...))      # checks the setup now (UserError)
    for record in records: ...                      # SampleRecords, in finishing order

`pairs` yields `(problem, sample_id, source)` or `(problem, sample_id, source, turn)`; it
may block and produce over time (say a generator reading a queue that inference fills):
each pair is submitted for building as soon as it arrives, and records stream out as they
finish. `RunWriter` keeps results/<name>/<run>/results.json up to date after each record.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Iterable, Iterator

from kb_eval.baseline.stage import ensure_peaks
from kb_eval.errors import UserError
from kb_eval.eval.config import EvalConfig
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.pool import make_pool
from kb_eval.eval.judge.score import summarize_levels
from kb_eval.problems import Problem
from kb_eval.results import (HARNESS_STATUSES, Producer, RunFile, SampleRecord, now_iso,
                             sample_order, read_model, write_json_atomic)

Pair = tuple  # (Problem, int, str) or (Problem, int, str, int)


def prepare(config: EvalConfig) -> EvalContext:
    """Fix hardware, secret and baseline for one evaluation (raises UserError)."""
    return EvalContext.create(config)


def evaluate(pairs: Iterable[Pair], config: EvalConfig | None = None, *,
             context: EvalContext | None = None) -> Iterator[SampleRecord]:
    ctx = context or prepare(config or EvalConfig())
    return _stream(ctx, pairs)


def _stream(ctx: EvalContext, pairs: Iterable[Pair]) -> Iterator[SampleRecord]:
    pool = make_pool(ctx)
    intake_done, intake_error = threading.Event(), []

    def intake() -> None:
        try:
            for n, pair in enumerate(pairs):
                if n == 0 and ctx.hardware.device == "cpu":
                    # before any build: compilers sharing the cores make the peaks come
                    # out low, which inflates every speed-of-light share kept against them
                    ensure_peaks(ctx.config.results_dir, "cpu", here=True)
                problem, sample, source, *rest = pair
                if not isinstance(problem, Problem):
                    raise TypeError(f"expected (Problem, sample, source), got {type(problem)}")
                pool.submit(problem, int(sample), source, int(rest[0]) if rest else 0)
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            intake_error.append(e)
        finally:
            intake_done.set()

    threading.Thread(target=intake, daemon=True, name="kb-intake").start()
    finished = False
    try:
        yield from pool.results(intake_done, intake_error)
        finished = True
    finally:
        pool.close(abandon=not finished)


def iter_queue(q: queue.Queue, sentinel=None) -> Iterator:
    """Items of a queue until `sentinel` arrives: feeds `evaluate` while producers run."""
    while (item := q.get()) is not sentinel:
        yield item


# ------------------------------------------------------------------ results file
class RunWriter:
    """results/<name>/<run>/results.json, rewritten atomically after every record."""

    def __init__(self, path: Path, ctx: EvalContext, *, name: str, run: str, source: str,
                 problems_asked: list[str], samples_per_problem: int = 1, resume: bool = False):
        self.path = Path(path)
        cfg = ctx.config
        if self.path.exists() and not resume:
            raise UserError(f"{self.path} exists: pass --resume to continue it, or pick "
                            f"another --run")
        fresh = RunFile(produced_by=Producer(tool="kb_eval.eval"), hardware=ctx.hardware,
                        precision=cfg.precision, timing=cfg.timing, name=name, run=run,
                        backend=ctx.backend, source=source,
                        baseline="live" if cfg.live_baseline else str(ctx.baseline_file),
                        config=cfg.model_dump(mode="json", exclude={"extra_env"}),
                        problems_asked=list(problems_asked),
                        samples_per_problem=samples_per_problem)
        self.file = fresh
        if resume and self.path.exists():
            self.file = self._resumed(read_model(self.path, RunFile), fresh)
        self.lock = threading.Lock()
        self._write()

    @staticmethod
    def _resumed(old: RunFile, fresh: RunFile) -> RunFile:
        for what, a, b in (("hardware", old.hardware.slug, fresh.hardware.slug),
                           ("precision", old.precision, fresh.precision),
                           ("backend", old.backend, fresh.backend),
                           ("timing method", old.timing.method, fresh.timing.method),
                           ("baseline", old.baseline == "live", fresh.baseline == "live"),
                           ("baseline mode", old.config.get("baseline_mode", "eager"),
                            fresh.config.get("baseline_mode", "eager"))):
            if a != b:
                raise UserError(f"cannot resume: the run has {what} {a}, this call {b}")
        old.problems_asked = list(dict.fromkeys(old.problems_asked + fresh.problems_asked))
        old.samples_per_problem = max(old.samples_per_problem, fresh.samples_per_problem)
        old.produced_by = fresh.produced_by
        return old

    def done(self) -> set[tuple[str, int, int]]:
        """Samples with a verdict; those the evaluator could not judge are done again."""
        return {(r.key, r.sample, r.turn) for r in self.file.samples
                if r.status not in HARNESS_STATUSES}

    def add(self, record: SampleRecord) -> None:
        """Add a record, replacing an earlier one of the same sample and turn (a retry)."""
        slot = (record.key, record.sample, record.turn)
        with self.lock:
            self.file.samples = [r for r in self.file.samples
                                 if (r.key, r.sample, r.turn) != slot] + [record]
            self._write()

    def _write(self) -> None:
        f = self.file
        f.samples.sort(key=sample_order)
        f.summary = summarize_levels(f.samples, f.problems_asked, f.samples_per_problem)
        f.updated = now_iso()
        write_json_atomic(self.path, f)


# ------------------------------------------------------------------ feedback
def feedback_fields(record: SampleRecord) -> dict:
    """The fields of inference.prompts.TurnResult, for a refinement turn's feedback."""
    outcome = {"correct": "correct", "incorrect": "mismatch"}.get(record.status, record.status)
    c, t = record.correctness, record.timing
    return {"outcome": outcome, "message": record.error or "",
            "log": record.detail or (record.crash.output_tail if record.crash else ""),
            "max_abs_diff": c.max_abs_diff if c else None,
            "max_rel_diff": c.max_rel_diff if c else None,
            "trials_failed": (c.trials - c.passed) if c else None,
            "trials": c.trials if c else None,
            "candidate_ms": t.median if t else None,
            "baseline_ms": record.baseline.median if record.baseline else None,
            "speedup": record.speedup}
