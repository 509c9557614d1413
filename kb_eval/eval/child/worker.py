"""The candidate's child: one candidate run, isolated (candidate code runs here only).

`run_candidate`: problem loaded, correctness inputs fingerprinted and tripwires set before
candidate code  ->  source exec'ed, ModelNew built with the reference's weights  ->  one
call per correctness trial (inputs re-checked, output guarded and saved)  ->  timed calls
on OS-random seeds, a random few re-checked (rechecks.py)  ->  shape probe. Outputs go to
`<label>.out` (wire/outputs.py) or the server's buffers (wire/device.py) and are judged on
the reference side. A `phase` file tells the parent where a dead child was.
"""

from __future__ import annotations

import json
import statistics
import traceback
from pathlib import Path

import torch
# imported while a spare waits, so a candidate's load_inline costs only the load
import torch.utils.cpp_extension  # noqa: F401

from kb_eval import clocks
from kb_eval.devlock import DeviceLock
from kb_eval.eval.wire.protocol import CandidateTask
from kb_eval.eval.wire import device as device_wire, outputs
from kb_eval.eval.child.baton import use_build_dirs
from kb_eval.eval.child.gate import may_time
from kb_eval.eval.child.calls import TimedCalls, Watch, round_ends
from kb_eval.eval.child.compiles import (CompileTurn, around_compiles, around_jit_compiles,
                                         yield_turn)
from kb_eval.eval.child.observe import OutputTypeError, observe, output_tensors
from kb_eval.eval.child.paired import ROUNDS_FILE, time_paired
from kb_eval.eval.child.rechecks import Rechecks
from kb_eval.eval.child.steps import Laps, mark, set_phase  # noqa: F401 - Laps: sample.py
from kb_eval.eval.wire.labels import PROBE_LABEL, label_name
from kb_eval.eval.child.probes import (changed_since, fingerprints, fresh_seed,
                                       host_weights, into_buffers, probe_inputs,
                                       recheck_count, settled, sync, tensor_bytes)
from kb_eval.faults import inject_fault
from kb_eval.isolation import sandbox
from kb_eval.harness import INIT_SEED, inputs_for, load_problem, reference_model
from kb_eval.inputs import build_model, copy_tree, make_inputs, precision_dtype
from kb_eval.problems import load_module
from kb_eval.profile.launches import count_or_error
from kb_eval.timing import SPENT, paired_rounds, plan_timing, time_callable

CUDA_ERROR_MARKERS = ("CUDA error", "CUDA_ERROR", "illegal memory access", "cudaError",
                      "device-side assert", "unspecified launch failure")
BEFORE_PROBE = "before_probe.json"


_STAGING = outputs.Staging()  # one pinned host buffer for every output this child saves
_SLOTS: list[device_wire.Slots] = []  # the server's buffers for this sample, if it gave any


def save_outputs(workdir: Path, label: str, tensors: list[torch.Tensor]) -> list | None:
    """Into the server's next buffer when they fit (its views returned), else a file (None)."""
    if _SLOTS and _SLOTS[0].put(workdir / f"{label}.out", tensors):
        return _SLOTS[0].last_bytes
    outputs.write(workdir / f"{label}.out", tensors, _STAGING)
    return None


def saved_on_device(tensors: list[torch.Tensor]) -> bool:
    """Whether `save_outputs` would copy these into a server buffer (not a file)."""
    return bool(_SLOTS) and _SLOTS[0].fits(tensors)


def failure(status: str, phase: str, exc: BaseException) -> dict:
    text = f"{type(exc).__name__}: {exc}".strip()
    if any(m in text for m in CUDA_ERROR_MARKERS):
        status = "cuda_error"
    elif isinstance(exc, torch.OutOfMemoryError):
        status = "oom"
    return {"status": status, "phase": phase, "error": text.splitlines()[0][:500],
            "detail": traceback.format_exc()[-6000:]}


# ------------------------------------------------------------------ candidate
def warm_up() -> None:
    """Run by a spare child before any task: host work only (a spare holds no device lock)."""
    host_weights()


def run_candidate(payload: dict, workdir: Path) -> dict:
    workdir, task = Path(workdir), CandidateTask.model_validate(payload)
    # untimed device work holds the lock shared, timing alone (kb_eval/devlock.py)
    lock = DeviceLock(task.device_lock)
    try:
        return _run(task, workdir, lock)
    finally:  # let go once the device is idle, traced, rather than at the process's end
        try:
            sync(torch.device(task.device))
        except Exception:  # noqa: BLE001 - a broken context: nothing of ours runs on it
            pass
        lock.release()


def _run(task: CandidateTask, workdir: Path, lock: DeviceLock) -> dict:
    device, precision = torch.device(task.device), task.precision
    steps = Laps()
    set_phase(workdir, "setup")
    mark(workdir, "wait")  # queued behind a timing step: not charged to this child
    lock.acquire("shared")
    mark(workdir, "setup")
    if (unopened := _prepare(task, device)) is not None:
        return unopened
    module, init = load_problem(task.problem_code, precision, device)
    ref_state = reference_model(module, copy_tree(init), precision, device).state_dict()
    # Drawn before candidate code exists, kept as fingerprints only (not n_trials copies
    # on the device): each trial's inputs are drawn again before its call and must match.
    trial_prints = [_prints_of(module, task.seed, i, precision, device)
                    for i in range(task.correct_trials)]
    compiling = CompileTurn(lock, workdir)
    around_compiles(compiling)
    around_jit_compiles(compiling)
    watch = Watch(device)  # last thing before candidate code: everything of ours is loaded
    set_phase(workdir, "load")
    mark(workdir, "load")
    steps.lap("setup")
    # between two untimed steps, a waiting timing step goes first
    between = lambda: yield_turn(lock, workdir)  # noqa: E731
    model = _load_and_init(task, init, ref_state, device, watch, steps, between)
    if isinstance(model, dict):
        return model  # the failure's record
    del ref_state
    set_phase(workdir, "correctness")
    seen: dict[str, dict] = {}
    call_s: list[float] = []
    failed = _correctness(model, module, task, trial_prints, workdir, seen, watch, call_s,
                          between)
    if failed is not None:
        return failed
    result = {"status": "ok", "load_s": steps.seconds["load"], "seen": seen,
              "saved": list(seen), "steps": steps.seconds}
    steps.lap("correctness")
    if compiling.seconds:
        steps.seconds["compile"] = round(compiling.seconds, 3)
    if task.gate and not may_time(Path(task.gate), list(seen), lock, workdir):
        lock.acquire("shared")  # the tripwires' last look (below) reads the device
        watch.check("end")
        return {**result, **watch.report(), "untimed": "its correctness outputs were wrong"}
    if task.timing is not None:
        failed = _timing_step(model, module, task, workdir, device, seen, watch, lock,
                              steps, result, _own_ms(call_s))
        if failed is not None:
            return failed
    _probe_step(model, module, task, workdir, device, watch, steps, result)
    return result


def _prepare(task: CandidateTask, device: torch.device) -> dict | None:
    """Before candidate code: the pairing's pid, build folders, output buffers opened; the
    failure's record when the buffers would not open, else None."""
    inject_fault("setup_oom", torch.OutOfMemoryError)
    if task.paired:  # who the parent stops while it times the reference
        (Path(task.paired.dir) / "pid").write_text(str(sandbox.leader_pid()))
    use_build_dirs(task.extensions_dir)
    if task.exchange:
        slots = device_wire.Slots(task.exchange, device)
        if (why := slots.open()) is not None:
            return {"status": device_wire.UNOPENED, "phase": "setup", "error": why}
        _SLOTS.append(slots)
    return None


def _load_and_init(task: CandidateTask, init, ref_state, device: torch.device, watch: Watch,
                   steps: Laps, between):
    """The candidate's ModelNew built with the reference's weights, or the failure's record."""
    try:
        candidate = load_module(task.source, "kb_candidate")
        model_cls = candidate.ModelNew
    except Exception as e:  # noqa: BLE001 - any failure to load is the candidate's
        return failure("compile_error", "load", e)
    steps.lap("load")
    watch.check("load")
    between()
    try:
        model = build_model(model_cls, copy_tree(init), INIT_SEED, device,
                            precision_dtype(task.precision), ref_state)
    except Exception as e:  # noqa: BLE001
        return failure("runtime_error", "init", e)
    watch.check("init")
    return model


def _own_ms(call_s: list[float]) -> float | None:
    """The candidate's pace: median correctness call after the first (lazy compiles), ms."""
    return statistics.median(call_s[1:]) * 1e3 if len(call_s) > 1 else None


def _timing_step(model, module, task: CandidateTask, workdir: Path, device: torch.device,
                 seen: dict, watch: Watch, lock: DeviceLock, steps: Laps,
                 result: dict, own_ms: float | None) -> dict | None:
    """The timed calls, the device held alone, into `result`; the failure's record or None."""
    set_phase(workdir, "timing")
    mark(workdir, "wait")
    dtype = precision_dtype(task.precision)
    rechecks = Rechecks(device, lambda label, ts: save_outputs(workdir, label, ts),
                        lambda seed: make_inputs(module.get_inputs, seed, device, dtype),
                        seen, saved_on_device)
    try:
        lock.acquire("exclusive")
        steps.lap("wait_lock")
        mark(workdir, "timing")
        result.update(_time_candidate(model, module, task, device, watch, rechecks, own_ms))
    except OutputTypeError as e:
        return {**failure("runtime_error", "timing", e), "output_type": True}
    except Exception as e:  # noqa: BLE001
        return {**failure("runtime_error", "timing", e), "seen": seen}
    steps.lap("timing")
    timing = result["timing"]
    steps.seconds["timing_calls"] = round(timing["mean"] * timing["n"] / 1e3, 4)
    steps.seconds.update({f"timing_{k}": round(v, 4) for k, v in SPENT.items()})
    # time timed calls waited for the candidate's threads (threads.py)
    steps.seconds["drain"] = round(watch.ledger.drain_ns / 1e9, 4)
    # the ledger's last look launches nothing: the next timing step may start meanwhile
    lock.release()
    result["threads_work"] = watch.ledger.report()
    mark(workdir, "wait")
    lock.acquire("shared")
    mark(workdir, "probe")
    try:
        rechecks.finish()
    except Exception as e:  # noqa: BLE001
        return {**failure("runtime_error", "timing", e), "seen": seen}
    result["saved"] = list(seen)
    steps.lap("rechecks")
    return None


def _probe_step(model, module, task: CandidateTask, workdir: Path, device: torch.device,
                watch: Watch, steps: Laps, result: dict) -> None:
    """After timing: launches counted, the shape probe, the tripwires' report into `result`."""
    mark(workdir, "probe")
    if task.count_launches:
        result["launches"] = _launches(model, module, task, device)
    watch.check("end")
    result.update(watch.report())
    _shape_probe(model, module, task, workdir, device, result)
    steps.lap("probe")
    watch.check("probe")
    result.update(watch.report())
    if device.type == "cuda":  # diagnostics (the candidate could fake it): never scored
        result["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)


def _correctness(model, module, task: CandidateTask, trial_prints: list, workdir: Path,
                 seen: dict, watch: Watch, call_s: list[float], between) -> dict | None:
    """One call per correctness trial on its inputs drawn again (seconds into `call_s`);
    None when all ran, else the failure's record."""
    device, precision = torch.device(task.device), task.precision
    buffers = None
    for i, prints in enumerate(trial_prints):
        between()
        if i:  # the first call belongs to the load budget (lazy compiles happen there)
            mark(workdir, f"call {i}")
        try:
            inject_fault("draw_oom", torch.OutOfMemoryError)
            fresh = inputs_for(module, task.seed, ("correct", i), precision, device)
        except torch.OutOfMemoryError as e:
            # our draw, not the candidate's call: `oom`, which the parent retries once
            return failure("oom", "correctness", e)
        inputs = buffers = into_buffers(buffers, fresh)
        try:
            call_s.append(_correctness_call(model, i, inputs, prints, workdir, device, seen,
                                            watch))
        except OutputTypeError as e:
            return {**failure("runtime_error", "correctness", e), "output_type": True}
        except Exception as e:  # noqa: BLE001
            return failure("runtime_error", "correctness", e)
        watch.check(label_name(("correct", i)))
        del inputs
    return None


def _prints_of(module, seed: int, i: int, precision: str, device: torch.device) -> list:
    inputs = inputs_for(module, seed, ("correct", i), precision, device)
    return fingerprints(inputs)


def _correctness_call(model, i: int, inputs: list, prints: list, workdir: Path,
                      device: torch.device, seen: dict, watch: Watch) -> float:
    """The call of trial `i`, its output observed and saved; its seconds."""
    label = label_name(("correct", i))
    if changed_since(inputs, prints):  # not what was drawn before candidate code loaded
        watch.inputs_tampered.append(label)
    t0 = clocks.perf_counter()
    with torch.no_grad():
        out = model(*inputs)
    sync(device)
    call_s = clocks.perf_counter() - t0
    tensors, seen[label] = observe(out, inputs, None)
    seen[label]["mutated"] = changed_since(inputs, prints)
    seen[label]["bytes"] = tensor_bytes(tensors)
    # the wait for late writes scales with the call's time, except the first's (lazy
    # compiles; docs/PERFORMANCE.md)
    calm = settled(tensors, device, call_s if i else 0.0,
                   lambda ts: save_outputs(workdir, label, ts), saved_on_device)
    seen[label]["unsettled"] = not calm
    return call_s


def _time_candidate(model, module, task: CandidateTask, device: torch.device, watch: Watch,
                    rechecks: Rechecks, own_ms: float | None) -> dict:
    """Time on inputs drawn, at each call, from a seed the OS gives us then: nothing the
    candidate can learn beforehand predicts them. Same inputs generator, device and timer
    as the reference's timing, so the times compare."""
    settings = plan_timing(task.timing, reference_ms=task.reference_call_ms,
                           launch_ms=task.reference_launch_ms, own_ms=own_ms,
                           paired=task.paired is not None)
    if task.paired and settings.cut:
        # announced before the first handshake: the pairing times the reference's side so
        (Path(task.paired.dir) / ROUNDS_FILE).write_text(str(settings.paired_rounds))
    dtype = precision_dtype(task.precision)
    rounds = paired_rounds(settings) if task.paired else []
    n_calls = settings.n_calls
    # Which timed calls are re-checked is drawn after each call returns (selection
    # sampling), so the candidate cannot know in advance which calls count.
    out_bytes = rechecks.seen.get("correct_0", {}).get("bytes")
    picks = recheck_count(task.recheck_timed, n_calls, out_bytes)

    def draw(i: int) -> tuple[int, list]:
        s = fresh_seed()
        return s, make_inputs(module.get_inputs, s, device, dtype)

    def recheck(tensors: list, s: int, inputs: list, i: int) -> None:
        rechecks.take(label_name(("timing", i, s)), tensors, s, inputs)

    calls = TimedCalls(model, watch, device, draw, round_ends(rounds, n_calls), n_calls,
                       picks, recheck, returned=rechecks.returned)
    ledger = watch.ledger
    with torch.no_grad():
        if rounds:
            stats = time_paired(calls.call, settings, device, calls.args, calls.on_output,
                                 Path(task.paired.dir), rounds, calls.untimed_ended,
                                 ledger.device_idle)
        else:
            stats = time_callable(calls.call, settings, device, calls.args, calls.on_output)
    return {"timing": stats.model_dump()}  # the ledger's report: _timing_step


def _launches(model, module, task: CandidateTask, device: torch.device) -> dict:
    """Kernels (CUDA) or aten calls (CPU) of one profiled call: diagnostics, never scored."""
    inputs = inputs_for(module, task.seed, ("correct", 0), task.precision, device)
    return count_or_error(lambda: model(*inputs), device)


def _shape_probe(model, module, task: CandidateTask, workdir: Path,
                 device: torch.device, result: dict) -> None:
    """One call on a smaller batch; the result so far is on disk first, as a kernel written
    for the problem's sizes only may crash here."""
    probe = probe_inputs(inputs_for(module, task.seed, ("shape", 0), task.precision, device))
    if probe is None:
        return
    (workdir / BEFORE_PROBE).write_text(json.dumps(result, default=str))
    set_phase(workdir, "probe")
    try:
        with torch.no_grad():
            out = model(*probe)
        sync(device)
        save_outputs(workdir, PROBE_LABEL, output_tensors(out))
        result["probe"] = PROBE_LABEL
    except Exception as e:  # noqa: BLE001 - refusing other sizes is allowed
        result["probe_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
