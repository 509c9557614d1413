"""The verdict on one sample, in the parent (trusted): which calls are checked, and how
the reference server's comparisons, the child's observations (data, never trusted alone),
the guards and the rules add up to a status, flags and a speedup."""

from __future__ import annotations

import math
import statistics

from kb_eval.eval.child.probes import recheck_count
from kb_eval.eval.judge.confidence import (paired_interval, paired_speedup, resolution,
                                           speedup_interval, widened)
from kb_eval.eval.judge.correctness import info_from_diffs, tolerances
from kb_eval.eval.judge.guards import dedupe, judge
from kb_eval.eval.judge.references import ReferenceRun
from kb_eval.eval.judge.rules import (child_flags, completeness, constant_reference,
                                      physical_floor, shape_probe, timing_plausible)
from kb_eval.eval.judge.score import VOIDS_SPEEDUP
from kb_eval.eval.judge.sol import judge_sol
from kb_eval.eval.judge.static import static_flags
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.wire.labels import PROBE_LABEL, TIMED_LABEL
from kb_eval.problems import Problem
from kb_eval.results import CrashInfo, Flag, SampleRecord
from kb_eval.timing import SLOW_CUT_RATIO, TimingSettings, TimingStats

# A candidate timed in fewer rounds whose speedup comes out above this was not the slow
# candidate its correctness calls said (a third of the margin that cut its rounds).
SLOW_CUT_UNFOUNDED = 3.0 / SLOW_CUT_RATIO


def child_failure(record: SampleRecord, result: dict) -> SampleRecord:
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
    """Correctness trials: as asked, their output files within FILES_BUDGET, at least two."""
    if not out_bytes:
        return asked
    return max(min(asked, 2), min(asked, FILES_BUDGET // out_bytes))


def labels_to_check(cfg, saved: object, correct_trials: int | None = None,
                    n_calls: int | None = None) -> list[str]:
    """Every correctness trial, plus the well-formed re-checked timed calls the child
    reports, one per call of `n_calls`, no more than asked for."""
    n_calls = n_calls or cfg.timing.n_calls
    by_call: dict[int, str] = {}
    for s in sorted(saved if isinstance(saved, list) else [], key=str):
        if (isinstance(s, str) and (m := TIMED_LABEL.fullmatch(s)) and int(m.group(1)) < n_calls
                and int(m.group(2), 16) < 2 ** 63):
            by_call.setdefault(int(m.group(1)), s)
    timed = [by_call[i] for i in sorted(by_call)]
    n = correct_trials or cfg.correct_trials
    return [f"correct_{i}" for i in range(n)] + timed[:cfg.recheck_timed]


def expected_rechecks(cfg, metrics: dict | None, timing: TimingSettings | None = None) -> int:
    n_calls = (timing or cfg.timing).n_calls
    return recheck_count(cfg.recheck_timed, n_calls, (metrics or {}).get("out_bytes"))


def judge_sample(ctx: EvalContext, problem: Problem, source: str, n_correct: int,
                 record: SampleRecord, result: dict, labels: list[str],
                 ref: ReferenceRun, paired: dict | None = None,
                 timing: TimingSettings | None = None) -> SampleRecord:
    """Add up the comparisons, apply the guards and rules, derive the speedup."""
    cfg = ctx.config
    timing = timing or cfg.timing
    record.correctness = _correctness(cfg, labels, ref)
    seen = result.get("seen") if isinstance(result.get("seen"), dict) else {}
    record.flags.extend(judge({lb: seen[lb] for lb in labels if isinstance(seen.get(lb), dict)},
                              ref.seen))
    record.flags.extend(child_flags(result))
    record.flags.extend(outside_work(result.get("threads_work")))
    timed = [lb for lb in labels if TIMED_LABEL.fullmatch(lb)]
    record.flags.extend(completeness(expected_rechecks(cfg, ref.state.metrics, timing), timed,
                                     bool(result.get("timing"))))
    record.flags.extend(timing_plausible(result.get("timing"), timing.trials))
    if result.get("timing") and not any(f.code == "implausible_timing" for f in record.flags):
        record.timing = TimingStats.model_validate(result["timing"])
        record.flags.extend(physical_floor(record.timing.median, ref.state.metrics, ctx.device_kind,
                                           ctx.hardware.name, cfg.timing.flush_l2))
    passed = record.correctness.passed == record.correctness.trials > 0
    record.correct = passed and not any(f.severity == "error" for f in record.flags)
    record.status = "correct" if record.correct else "incorrect"
    if record.correct:  # findings that matter only for a sample that counts
        record.flags.extend(static_flags(source))
        record.flags.extend(constant_reference(ref.seen, labels[:n_correct]))
        record.flags.extend(_probe_flags(result, ref.diffs))
    else:
        reasons = record.correctness.failures[:1] + [f.message for f in record.flags
                                                      if f.severity == "error"][:1]
        record.error = "; ".join(reasons) or "outputs differ from the reference"
    file_base = None if cfg.live_baseline else ctx.baseline_for(problem)
    _reference_alone(ctx, cfg, problem, ref, paired, record, file_base)
    if record.correct and record.timing and record.timing.median > 0:
        if file_base is not None:
            record.speedup_vs_baseline = file_base.median / record.timing.median
        if record.baseline:
            record.speedup = record.baseline.median / record.timing.median
            interval = speedup_interval(record.baseline, record.timing)
            if interval is not None:
                record.speedup_ci, record.speedup_ci_method = interval
        _use_pairing(record, paired)
    judge_sol(record, ref.state.metrics, cfg.precision,
              flushed=ctx.device_kind == "cuda" and cfg.timing.flush_l2)
    record.flags.extend(cut_flags((paired or {}).get("timing"), record.speedup))
    record.flags = dedupe(record.flags)
    record.speedup_counted = record.speedup is not None and not any(
        f.code in VOIDS_SPEEDUP for f in record.flags)
    return record


def cut_flags(cut: TimingSettings | None, speedup: float | None) -> list[Flag]:
    """Flags for a candidate timed in fewer rounds; a warning when it was not that slow after
    all (its pace was judged by correctness calls it could have slowed on purpose)."""
    if cut is None:
        return []
    flags = [Flag(code="fewer_rounds", severity="info",
                  message=f"timed in {cut.paired_rounds} paired rounds of one call: its "
                          f"correctness calls took {SLOW_CUT_RATIO:g}x the reference's "
                          "or more")]
    if speedup is not None and speedup > SLOW_CUT_UNFOUNDED:
        flags.append(Flag(code="fewer_rounds_unfounded", message=f"timed in fewer rounds as "
                          f"a very slow candidate, yet its speedup is {speedup:.2f}"))
    return flags


def _reference_alone(ctx, cfg, problem, ref: ReferenceRun, paired: dict | None,
                     record: SampleRecord, file_base: TimingStats | None) -> None:
    """The reference's time unpaired: live, timed alone once per problem, or the file's."""
    if cfg.live_baseline:
        record.baseline = ref.state.timing or paired_reference(paired)
        record.baseline_source = "live"
        if ref.state.timing_error:
            record.flags.append(Flag(code="no_baseline", message=f"no {cfg.baseline_mode} "
                                     f"baseline for {problem.key}: {ref.state.timing_error}"))
        return
    record.baseline, record.baseline_source = file_base, "file"
    if file_base is None and not (paired or {}).get("rounds"):
        record.flags.append(Flag(code="no_baseline", message=f"{ctx.baseline_file} has "
                                 f"no timing for {problem.key}: no speedup"))


def _use_pairing(record: SampleRecord, paired: dict | None) -> None:
    """When the pairing is sound, speedup, interval and baseline come from the paired
    rounds; otherwise the reference timed alone stays, and a warning says why."""
    rounds, cand = (paired or {}).get("rounds"), record.timing.rounds
    if paired is None:
        return
    if not rounds or not cand or len(rounds) != len(cand):
        why = paired.get("error") or "the candidate's rounds do not match the reference's"
        record.flags.append(Flag(code="unpaired", message=f"speedup interval not paired: {why}"))
        return
    ref = paired_reference(paired)
    record.baseline, record.baseline_source = ref, "live"  # the method names the pairing
    record.speedup = paired_speedup(ref.rounds, cand)
    record.speedup_ci = widened(*paired_interval(ref.rounds, cand),
                                resolution(ref, record.timing))
    record.speedup_ci_method = "paired_rounds"


def paired_reference(paired: dict | None) -> TimingStats | None:
    """The reference's calls of the sample's paired rounds, as one timing (None: none)."""
    rounds = (paired or {}).get("rounds")
    if not rounds:
        return None
    return TimingStats.of([ms for r in rounds for ms in r]).model_copy(
        update={"rounds": [statistics.median(r) for r in rounds],
                "launch_ms": paired.get("launch_ms")})


OUTSIDE_SHARE, OUTSIDE_SLACK_MS = 0.1, 1.0


def outside_work(report: object) -> list[Flag]:
    """`work_outside_call` when the candidate's threads used CPU between timed calls beyond
    OUTSIDE_SHARE of the timed total plus OUTSIDE_SLACK_MS, or the GPU was busy at the start
    of two or more calls (child/threads.py)."""
    if not isinstance(report, dict):
        return []
    nums = {k: report.get(k) for k in ("outside_ms", "timed_ms", "busy_calls")}
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in nums.values()):
        return [Flag(code="implausible_timing", severity="error",
                     message=f"malformed threads report {report!r:.200}")]
    out, timed, busy = nums["outside_ms"], nums["timed_ms"], nums["busy_calls"]
    if out > OUTSIDE_SHARE * timed + OUTSIDE_SLACK_MS:
        names = report.get("threads")
        alive = ("; its threads alive: " + ", ".join(map(str, names[:5]))[:300]
                 if isinstance(names, list) and names else "")
        return [Flag(code="work_outside_call", severity="error",
                     message=f"the candidate's threads used {out:.1f} ms of CPU between its "
                             f"timed calls ({timed:.1f} ms timed): work the timer did not "
                             f"see{alive}")]
    if busy >= 2:
        return [Flag(code="work_outside_call", severity="error",
                     message=f"the device was still busy when {busy} timed calls began: "
                             "work launched outside the calls")]
    return []


def _correctness(cfg, labels: list[str], ref: ReferenceRun):
    """Both rules' verdicts, the one asked (run's or problem's) deciding."""
    tol = ref.tolerance
    atol, rtol = tolerances(cfg.precision, cfg.atol, cfg.rtol)
    plan = ref.state.plan
    info = info_from_diffs(labels, ref.diffs, tol.get("atol", atol), tol.get("rtol", rtol),
                           tol.get("rule", cfg.tolerance),
                           plan.truth_reason if plan is not None else None)
    info.tolerance_source = tol.get("source")
    return info


def outputs_pass(cfg, labels: list[str], ref: ReferenceRun) -> bool:
    """Whether every one of `labels` passed its comparison (the verdict's own rule)."""
    info = _correctness(cfg, labels, ref)
    return info.passed == info.trials > 0


def _probe_flags(result: dict, diffs: dict[str, dict]) -> list[Flag]:
    """A wrong answer without an error on a smaller batch (probes.probe_batch): the candidate
    holds only for the problem's own sizes."""
    d = diffs.get(PROBE_LABEL)
    if d is None or result.get("probe") != PROBE_LABEL:
        return []
    return shape_probe(None if d.get("ok") else d.get("error"),
                       "a smaller batch than the problem's")
