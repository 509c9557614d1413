"""One try at one sample, from built to judged: run the candidate child on a device, then
the reference server, which compares the candidate's saved outputs with its own on the
device; the verdict (judge/verdict.py) fills in its SampleRecord. Retries and whose fault a
failure is: schedule/retry.py."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kb_eval.eval.child.steps import Laps
from kb_eval.eval.child.worker import BEFORE_PROBE
from kb_eval.eval.judge.crashes import crash_info, status_of
from kb_eval.eval.judge.references import ReferenceStore, take_server_seconds
from kb_eval.eval.judge.verdict import child_failure, judge_sample, labels_to_check
from kb_eval.eval.schedule.build import BuildOutcome, source_sha256
from kb_eval.eval.schedule.context import EvalContext, is_cpu
from kb_eval.eval.schedule.exchange import Exchange, checked_calls, exchange_for
from kb_eval.eval.schedule.overlap import Budgets, Slot, intake_cap
from kb_eval.eval.schedule.gate import compare_after, correctness_check, start_gate
from kb_eval.eval.schedule.pairing import finish_pairing, start_pairing
from kb_eval.eval.schedule.reaper import sweep_escapees
from kb_eval.eval.wire.device import UNOPENED, slot_size
from kb_eval.eval.wire.labels import PROBE_LABEL
from kb_eval.eval.wire.protocol import CandidateTask
from kb_eval.faults import inject_fault
from kb_eval.isolation import ChildOutcome, refusals, run_isolated, start_spares
from kb_eval.problems import Problem
from kb_eval.profile.launches import paired_counts
from kb_eval.results import Flag, LaunchCounts, SampleRecord
from kb_eval.timing import TimingSettings


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
    exchange_bytes: int = 0  # outputs handed over on the device: its buffers' size (plan)
    timing: TimingSettings | None = None  # the run's, with its calls budgeted (retry.py)
    reference_call_ms: float | None = None  # the reference's call, roughly (its estimate)
    reference_launch_ms: float | None = None  # of it, launching (the same estimate)
    slot: Slot | None = None  # its hold on the device (overlap.py), when it shares one
    intake_done: Callable[[], None] = lambda: None  # its lane's intake (overlap.py)
    refused: list[str] = field(default_factory=list)  # what its run child tried (refusals.py)

    def past_timing(self) -> None:
        """The child has left its timing step: its place on the device and its lane's
        intake go to the next sample (overlap.py)."""
        if self.slot is not None:
            self.slot.timed()
        self.intake_done()

    def compiling(self, on: bool) -> None:
        """The child started (on) or ended a compile of the candidate's own: no place on
        the device held meanwhile (overlap.py)."""
        if self.slot is not None:
            self.slot.compiling(on)


CHILD_TARGET = "kb_eval.eval.child.worker:run_candidate"


def start_children(ctx: EvalContext, device: str) -> None:
    """Have `device`'s candidate children start up (torch, CUDA) while the run's first
    builds and memory plans go on, rather than after them."""
    start_spares(CHILD_TARGET, env=ctx.device_env(device), warm_cuda=not is_cpu(device))


def new_record(ctx: EvalContext, task: SampleTask) -> SampleRecord:
    p = task.problem
    return SampleRecord(key=p.key, sample=task.sample, turn=task.turn, source=p.source,
                        level=p.level, problem_id=p.problem_id, name=p.name,
                        backend=ctx.backend, precision=ctx.config.precision,
                        source_sha256=source_sha256(task.source), sandbox=ctx.config.sandbox)


def finish(record: SampleRecord, task: SampleTask) -> SampleRecord:
    record.wall_s = round(time.monotonic() - task.started, 3)
    record.phases = dict(task.laps.seconds)
    # the reference server's own work for this sample, its paired rounds apart (the
    # device's second serial resource beside the timing lock: eval_throughput.py)
    record.phases.update({"server": 0.0, **take_server_seconds()})
    refused = [*(record.build.refused if record.build else []), *task.refused]
    if refused:
        record.flags.append(Flag(code="sandbox_refused", severity="error",
                                 message="the sandbox refused: " + "; ".join(refused)[:600]))
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


def evaluate_once(ctx: EvalContext, refs: ReferenceStore, task: SampleTask,
                  device: str) -> SampleRecord:
    """The candidate child, then the reference server that compares its outputs; then
    the rules. The outputs go through buffers on the device when the plan made room for
    them (exchange.py), else through files."""
    if task.slot is not None:  # a retry: its first try may have given its place back
        task.slot.retake()
    n = checked_calls(ctx, _trials(ctx.config, task), task.out_bytes)
    if task.exchange_bytes:  # the plan may have made room for the first few only
        n = min(n, task.exchange_bytes // slot_size(task.out_bytes))
    with exchange_for(refs, device, str(task.workdir), n, task.out_bytes,
                      task.exchange_bytes > 0) as exchange:
        if exchange is not None:
            task.laps.lap("export")
        record = _evaluate(ctx, refs, task, device, exchange)
    if record is None:  # the child could not open the buffers (ours): again, with files
        task.exchange_bytes = 0
        return evaluate_once(ctx, refs, task, device)
    return record


def _evaluate(ctx: EvalContext, refs: ReferenceStore, task: SampleTask, device: str,
              exchange: Exchange | None) -> SampleRecord | None:
    """The sample's record; None when its child could not open the buffers handed over
    (it ended before candidate code ran)."""
    cfg = ctx.config
    record = new_record(ctx, task)
    record.build = task.build.info
    run_dir = run_folder(ctx, task)
    payload = _payload(ctx, task, device)
    if exchange is not None:
        payload["exchange"] = exchange.spec
    pairing = start_pairing(ctx, refs, task.problem, device, run_dir, payload,
                            _timing(cfg, task))
    gate = None  # a wrong answer judged before its timing step (gate.py): files only
    if exchange is None and payload.get("timing") is not None:
        gate = start_gate(run_dir / "gate", payload, correctness_check(
            refs, task.problem, cfg, _trials(cfg, task), run_dir, device))
    payload = CandidateTask.model_validate(payload).model_dump(mode="json")  # typed
    window = _WINDOWS.begin()
    # The budgets enforce the run timeout less the time queued for the timing lock (at
    # most the runs of the other samples the device's lanes took); this is the hard cap.
    out = run_isolated(CHILD_TARGET, payload, workdir=run_dir,
                       timeout_s=cfg.run_timeout_s * intake_cap(cfg.lane_depth),
                       mem_limit_mb=cfg.mem_limit_mb, env=ctx.device_env(device),
                       prewarm=True, warm_cuda=not is_cpu(device),
                       budget=Budgets(run_dir, cfg, task.past_timing, task.compiling),
                       allow=ctx.run_allow(task.build.extensions_dir, device))
    alone = _WINDOWS.end(window)
    if gate is not None:
        gate.close()
    task.refused = refusals.read(run_dir)
    paired = finish_pairing(pairing)
    task.laps.lap("run")
    if (paired or {}).get("busy_ms"):  # other processes' GPU work the reference waited out
        task.laps.seconds["pair_busy_max"] = round(paired["busy_ms"] / 1e3, 4)
    if (paired or {}).get("rounds"):  # of child_timing: the reference's rounds, its calls
        task.laps.seconds["pair_reference"] = round(paired["ref_wall_s"], 3)
        task.laps.seconds["pair_reference_calls"] = round(paired["ref_calls_s"], 3)
        for part, seconds in paired.get("ref_spent", {}).items():  # "server": all of it
            task.laps.seconds[f"pair_reference_{part}"] = round(seconds, 4)
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
    if result.get("status") == UNOPENED and exchange is not None:
        return None  # said in setup, before candidate code: the child's word holds
    record.compiled = result.get("status") != "compile_error"
    task.laps.seconds.update(_child_steps(result.get("steps")))
    if result.get("status") != "ok":
        return finish(child_failure(record, result), task)
    timing = (paired or {}).get("timing") or _timing(cfg, task)  # a slow one's cut rounds
    labels = labels_to_check(cfg, result.get("saved"), _trials(cfg, task), timing.n_calls)
    probe = [PROBE_LABEL] if result.get("probe") == PROBE_LABEL else []
    ref = compare_after(refs, task.problem, labels + probe, run_dir, device, exchange,
                        bool((paired or {}).get("rounds")), gate)
    task.laps.lap("reference")
    if ref.exchange_lost:  # ours: the server restarted while the child ran (retried)
        record.status = "eval_error"
        record.error = "the reference server was started again while the candidate ran: " \
                       "the outputs it had handed over on the device were lost"
        return finish(record, task)
    if ref.error:
        record.status, record.error, record.detail = "reference_error", ref.error, ref.state.detail
        record.crash = ref.state.crash
        return finish(record, task)
    # A timed call the reference could not redo (a seed it refused) is not re-checked:
    # it then counts as missing (timed_recheck_missing).
    labels = [lb for lb in labels if lb in ref.diffs]
    inject_fault("judge_exception")
    judge_sample(ctx, task.problem, task.source, _trials(cfg, task), record, result, labels,
                 ref, paired, timing)
    _note_diagnostics(record, result, ref.state.metrics or {})
    task.laps.lap("judge")
    return finish(record, task)


def _payload(ctx: EvalContext, task: SampleTask, device: str) -> dict:
    """What the candidate's child is told (kb_eval.eval.child.worker:run_candidate)."""
    cfg = ctx.config
    return {"problem_code": task.problem.code, "source": task.source,
            "extensions_dir": task.build.extensions_dir,
            "device": ctx.torch_device(device), "precision": cfg.precision,
            "seed": ctx.problem_seed(task.problem), "correct_trials": _trials(cfg, task),
            "timing": _timing(cfg, task).model_dump(), "recheck_timed": cfg.recheck_timed,
            "reference_call_ms": task.reference_call_ms,
            "reference_launch_ms": task.reference_launch_ms,
            "count_launches": cfg.counts_launches(ctx.device_kind),
            "device_lock": str(ctx.lock_path(device))}


def _note_diagnostics(record: SampleRecord, result: dict, metrics: dict) -> None:
    """Memory peaks, the reference's determinism and (correct samples) launch counts:
    recorded, never scored."""
    record.memory = {"reference_peak": metrics.get("peak_bytes"),
                     "candidate_peak": _int_or_none(result.get("peak_mem_bytes"))}
    record.reference_deterministic = metrics.get("deterministic")
    if record.correct and result.get("launches") is not None:
        record.launches = LaunchCounts(**paired_counts(result.get("launches"),
                                                       metrics.get("launches")))


SHM = Path("/dev/shm")
RUN_SCRATCH = "kb_eval_run_"  # + the pool's pid: its candidates' output files in SHM


def run_scratch() -> Path:
    """This process's folder in SHM for its candidates' output files."""
    return SHM / f"{RUN_SCRATCH}{os.getpid()}"


def run_folder(ctx: EvalContext, task: SampleTask) -> Path:
    """Where the candidate's child writes its output files: /dev/shm when they fit with
    room to spare, else the sample's folder (disk writeback throttling; docs/PERFORMANCE.md)."""
    files = (task.out_bytes or 0) * (_trials(ctx.config, task) + ctx.config.recheck_timed + 1)
    try:
        roomy = SHM.is_dir() and shutil.disk_usage(SHM).free > files + (2 << 30)
    except OSError:
        roomy = False
    if not roomy or not task.out_bytes:
        return task.workdir / "run"
    task.scratch = run_scratch() / task.workdir.name
    return task.scratch / "run"


def _int_or_none(x: object) -> int | None:
    return x if type(x) is int else None


def _child_steps(steps: object) -> dict[str, float]:
    """The candidate child's own account of its steps (diagnostics only: never trusted
    for anything that is scored)."""
    if not isinstance(steps, dict):
        return {}
    return {f"child_{k}": round(float(v), 3) for k, v in list(steps.items())[:16]
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


def _trials(cfg, task: SampleTask) -> int:
    return task.correct_trials or cfg.correct_trials


def _timing(cfg, task: SampleTask) -> TimingSettings:
    return task.timing or cfg.timing
