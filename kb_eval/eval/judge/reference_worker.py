"""The reference side of a sample, in one long-lived trusted child per device.

`compare_sample` runs in an `isolation.Server` (no candidate code ever runs in that
process; it only reads the candidate's output files, kb_eval/eval/wire/outputs.py, which hold
no code, or the device buffers it exported for the sample, wire/device.py). Per sample it runs `Model` on the labels asked (correctness trials, the shape
probe, timed calls by the candidate's seeds) and compares each output with the candidate's
file for that label, on the device. Reference outputs never touch the disk.

What a problem's reference gives is the same for every sample (same code, precision,
seed), so the process keeps, per problem: the loaded module, the built model, and the
outputs of the correctness trials and the shape probe (under a memory budget). A later
sample of that problem computes only its timed calls' outputs (new seeds every sample).
On the H200 (100 samples, 64 MB outputs) the reference step of a sample took 1.11 s
(median) in a fresh child per sample, and 0.28 s here.

With `compare.truth`, each label's reference also runs in float64 on the same inputs
(rounded to the run's precision, then widened) and weights (the model widened in place
for that call and narrowed back: exact, and no second copy of the weights stays on the
device), one label at a time: the truth is dropped after its comparison unless it is a
fixed label's and there is room to keep it with the outputs (judge/truth.py).

Also, when asked (the first sample of a problem): what the physical floor needs of the
problem, and the reference's timing (live baseline); and, once per device, the floor's
figures of the device itself (`device_floor`: timed, so the parent holds the device alone
for that call only).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import signal
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from kb_eval import clocks
from kb_eval.eval.wire import device as device_wire, outputs
from kb_eval.eval.judge.correctness import judge_file, resolve_tolerance
from kb_eval.eval.judge.meta_rnn import shape_only_rnns
from kb_eval.eval.child.calls import TimedCalls, Watch
from kb_eval.eval.child.observe import observe, output_tensors
from kb_eval.eval.wire.labels import label_name
from kb_eval.eval.child.probes import (changed_since, copy_bandwidth, empty_call_ms,
                                       fingerprints, host_weights, probe_inputs, sync,
                                       tensor_bytes)
from kb_eval.compilers.tvm import baseline_callable as tvm_callable, is_tvm_mode
from kb_eval.harness import (compile_model, inputs_for, load_problem, reference_model,
                             time_model)
from kb_eval.faults import inject_fault
from kb_eval.inputs import (cast_tree, make_init_inputs, make_inputs, precision_dtype,
                            set_precision_flags, widened)
from kb_eval.profile.launches import count_or_error
from kb_eval.timing import (SPENT, TimingSettings, busy_ms_before_quiet, kept, paired_rounds,
                            round_timer, spent, spent_since, take_launch_ms, time_calls)

MAX_PROBLEMS = 8  # problems kept loaded (models hold their weights)
# Reference outputs kept on a GPU between samples: at most this share of its memory. They
# stay resident while candidates run, so they are part of the harness's footprint (the
# memory plan in docs/GUARANTEES.md); 3 % is 2.4 GB on an 80 GB H100.
KEEP_SHARE = 0.03
RELEASE_SLACK = 1 << 30  # cached allocator blocks beyond what is kept: returned after a call


@dataclass
class Problem:
    module: ModuleType
    model: torch.nn.Module
    outputs: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    seen: dict[str, dict] = field(default_factory=dict)
    truth: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # float64 outputs
    truth_error: str | None = None  # the reference cannot run in float64: why
    first: list | None = None  # fingerprints of correct_0's outputs: input-independent?
    peak_bytes: int | None = None  # the device memory a forward took, inputs included
    # The baseline timed live, per mode other than eager: the compiled model, or why the
    # compiler could not take this problem (--live-baseline --baseline-compile MODE).
    compiled: dict[str, object] = field(default_factory=dict)
    _watch: Watch | None = None

    def watch(self, device: torch.device) -> Watch:
        """Tripwires and a ledger of this process's own, for the bookkeeping around its
        timed calls (calls.py); what they find here is never read."""
        if self._watch is None:
            self._watch = Watch(device)
        return self._watch

    @property
    def bytes(self) -> int:
        return sum(tensor_bytes(ts) for ts in (*self.outputs.values(), *self.truth.values()))

    def forget_outputs(self) -> None:
        self.outputs.clear()
        self.seen.clear()
        self.truth.clear()


_LOADED: OrderedDict[str, Problem] = OrderedDict()
_STAGING = outputs.Staging()  # candidates' files are read into it, then copied to the GPU
# Per sample in flight (its run folder): the buffers its child copies outputs into (GPU).
_EXCHANGES: dict[str, device_wire.Exported] = {}


def _problem(payload: dict, device: torch.device) -> Problem:
    """The problem's module and model, loaded once per (code, precision, seed, device)."""
    precision = payload["precision"]
    key = hashlib.sha256(repr((payload["problem_code"], precision, payload["seed"],
                               str(device))).encode()).hexdigest()
    set_precision_flags(precision)  # every call: nothing a problem's code did may linger
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return _LOADED[key]
    module, init = load_problem(payload["problem_code"], precision, device)
    _LOADED[key] = Problem(module, reference_model(module, init, precision, device))
    while len(_LOADED) > MAX_PROBLEMS:
        _LOADED.popitem(last=False)
    return _LOADED[key]


def _room_for(nbytes: int, device: torch.device, budget: int) -> bool:
    """Whether outputs of `nbytes` may be kept (all problems' within `budget`), dropping
    least recently used problems' outputs to make room."""
    if device.type == "cuda":
        budget = min(budget, int(KEEP_SHARE * torch.cuda.get_device_properties(device).total_memory))
    total = sum(p.bytes for p in _LOADED.values())
    for p in list(_LOADED.values())[:-1]:  # never the problem in hand
        if total + nbytes <= budget:
            break
        total -= p.bytes
        p.forget_outputs()
    return total + nbytes <= budget


def _inputs(module: ModuleType, seed: int, kind: str, i: int, label_seed, precision: str,
            device: torch.device) -> list:
    if label_seed is not None:  # a timed call of a candidate: its own seed
        return make_inputs(module.get_inputs, label_seed, device, precision_dtype(precision))
    inputs = inputs_for(module, seed, (kind, i), precision, device)
    return probe_inputs(inputs) if kind == "shape" else inputs


def _reference_outputs(p: Problem, payload: dict, name: str, kind: str, i: int, label_seed,
                       device: torch.device):
    """(outputs, what was seen, float64 truth or why there is none) of the reference on
    one label; kept when the label is the same for every sample (correctness trials, shape
    probe: no seed) and there is room."""
    want_truth = bool(payload["compare"].get("truth"))
    if name in p.outputs and (not want_truth or name in p.truth or p.truth_error):
        return p.outputs[name], p.seen[name], p.truth.get(name, p.truth_error)
    precision, seed = payload["precision"], payload["seed"]
    if name in p.outputs:
        tensors, seen = p.outputs[name], p.seen[name]
    else:
        inputs = _inputs(p.module, seed, kind, i, label_seed, precision, device)
        with spent("reference"):
            tensors, seen = _run_reference(p, inputs, kind, device)
        del inputs  # gigabytes, maybe: the truth draws its own

    def keep(truth) -> None:
        kept = [tensors] + ([truth] if isinstance(truth, list) else [])
        if label_seed is None and _room_for(tensor_bytes(kept), device,
                                            payload.get("keep_bytes", 0)):
            p.outputs[name], p.seen[name] = tensors, seen
            if isinstance(truth, list):
                p.truth[name] = truth

    if not want_truth or p.truth_error:
        keep(None)
        return tensors, seen, p.truth_error if want_truth else None

    def truth_now():
        # On the label's inputs drawn again (the same seed and label: the ones the
        # candidate got), not on those the reference ran on: it may have changed them.
        truth = _float64_truth(p, _inputs(p.module, seed, kind, i, label_seed, precision,
                                          device), precision, device)
        keep(truth)
        return truth
    keep(None)
    return tensors, seen, truth_now  # judge_file asks only beyond the reference's rounding


# A label's float64 truth is computed only when the candidate's output is further from
# the reference's than its rounding (judge/truth.py within_rounding: closer outputs pass
# the float64 rule whatever the truth), on its inputs drawn again. On the H100 the truth
# took 70 of the reference server's 159 busy seconds over KernelBench level 2's copies
# when it was computed for every label (float64 convolutions being slow there), and 59.7
# of 169.1 over level 1 when computed for every output not equal to the reference's
# (nondeterministic references; problems of over 1 GiB, whose truth was taken at once:
# level1/68's 25.1 s, a transposed 3-D convolution). A problem all of whose samples stay
# within rounding never learns whether its reference runs in float64: it needs not.


def _run_reference(p: Problem, inputs: list, kind: str, device: torch.device):
    prints = fingerprints(inputs)  # not a copy: inputs may be gigabytes
    before = _reset_peak(device)
    with torch.no_grad():
        out = with_room(lambda: p.model(*inputs), device)
    sync(device)
    _note_peak(p, device, before)
    tensors, seen = observe(out, inputs, None)
    seen["mutated"] = changed_since(inputs, prints)
    tensors = [t.detach() for t in tensors]
    if kind == "correct":
        if p.first is None:
            p.first = fingerprints(tensors)
        else:
            seen["same_as_first"] = fingerprints(tensors) == p.first
    return tensors, seen


def _float64_truth(p: Problem, inputs: list, precision: str,
                   device: torch.device) -> list[torch.Tensor] | str:
    """The reference in float64 on these (already rounded) inputs, or why it cannot run
    so (remembered for the problem: its samples fall back to the KernelBench rule)."""
    if p.truth_error:
        return p.truth_error
    try:
        with spent("truth"), widened(p.model, precision_dtype(precision)) as model, \
                torch.no_grad():
            # the widened inputs live only during the call
            out = with_room(lambda: model(*[cast_tree(x, torch.float64) for x in inputs]),
                            device)
            sync(device)
        return [t.detach() for t in output_tensors(out)]
    except Exception as e:  # noqa: BLE001 - an op without float64 support, a fixed dtype
        p.truth_error = ("the reference does not run in float64: "
                         f"{type(e).__name__}: {e}".splitlines()[0][:300])
        return p.truth_error


def compare_sample(payload: dict, workdir: Path) -> dict:
    """`Model` on payload["labels"], each output compared with the candidate's file for
    that label in payload["compare"]["folder"] (the candidate child has ended), or with
    the buffer the file's header names (payload["compare"]["exchange"]: the sample's key,
    its buffers freed after). Also the server's other calls, by payload key."""
    device = torch.device(payload["device"])
    if payload.get("plan"):
        return plan_problem(payload, device)
    if payload.get("time_calls"):
        return time_rounds(payload, device)
    if payload.get("estimate"):
        return estimate_call(payload, device)
    if payload.get("device_floor"):
        return device_floor(payload["device_floor"], device)
    if payload.get("export"):
        return export_buffers(payload["export"], device)
    if payload.get("exchange_free"):
        return free_buffers(payload["exchange_free"])
    key = payload["compare"].get("exchange")
    if key is not None and key not in _EXCHANGES:  # this server is not the one that
        return {"exchange_lost": True}  # exported them (it was started again)
    spent_before = SPENT.copy()
    try:
        result = _compare(payload, device,
                          _EXCHANGES[key].views() if key is not None else None)
    finally:
        free_buffers(key)
    # where the server's time on a comparison went (phases server_*; timing.SPENT)
    result["spent"] = spent_since(spent_before, ("reference", "truth", "metrics", "judge"))
    return result


def export_buffers(spec: dict, device: torch.device) -> dict:
    """Buffers for one sample's outputs (wire/device.py), kept until free_buffers: all
    `n` asked, or {"short": True} when they do not fit beside what this server keeps.
    With `give_back` (asked again in a shared turn of the device: references.export), what
    this server keeps of its problems is given back first and as many as then fit are
    made (`at_least` of them, else none). Before, one buffer short meant none: on the
    H100 a KernelBench norm (four 7.5 GB outputs checked) then sent every output through
    files, 10-20 s of a sample that runs alone, in one run of two."""
    free_buffers(spec["key"])  # a retry of the same sample
    n, nbytes, at_least = int(spec["n"]), int(spec["bytes"]), spec.get("at_least")
    try:
        if spec.get("give_back"):
            _LOADED.clear()  # kept models and outputs: a later comparison computes them again
            release(device, force=True)
            exported = device_wire.Exported(n, nbytes, device, at_least=at_least)
        else:
            # Nothing given back: this runs beside other samples' timing steps, whose
            # reference rounds keep their model and cached blocks to the last round
            # (_time_round); emptied mid-step, the next round would load and map afresh.
            try:
                exported = device_wire.Exported(n, nbytes, device)
            except device_wire.CudaError as e:
                return {"short": True, "error": str(e)[:300]}
    except (device_wire.CudaError, ValueError) as e:  # no room, or too many: files
        # (an answer, not a failed call: that would end this server and what it keeps)
        return {"error": str(e)[:300]}
    _EXCHANGES[spec["key"]] = exported
    return {"handles": exported.handles, "bytes": exported.nbytes}


def free_buffers(key: str | None) -> dict:
    exported = _EXCHANGES.pop(key, None) if key is not None else None
    if exported is not None:
        exported.free()
    return {}


def _compare(payload: dict, device: torch.device, slots: list[torch.Tensor] | None) -> dict:
    inject_fault("reference_kill")
    p = _problem(payload, device)
    compare = payload["compare"]
    tol = resolve_tolerance(payload["precision"], compare.get("atol"), compare.get("rtol"),
                            compare.get("rule", "f64"), getattr(p.module, "KB_TOLERANCE", None))
    seen: dict[str, dict] = {}
    diffs: dict[str, dict] = {}
    refs = truth = None
    for label in payload["labels"]:
        kind, i, *rest = label
        label_seed = rest[0] if rest else None
        name = label_name((kind, i, label_seed))
        try:
            refs, seen[name], truth = _reference_outputs(p, payload, name, kind, i,
                                                         label_seed, device)
        except Exception as e:  # noqa: BLE001
            if kind == "correct":  # the problem's own trials: a broken reference
                raise
            # The probe's shape, or a seed a candidate reported: never fatal for the
            # problem (the parent counts a missing comparison against that candidate).
            seen[name] = {"skipped": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
            continue
        with spent("judge"):  # a lazy truth computed in it counts as "truth" too
            diffs[name] = judge_file(Path(compare["folder"]) / f"{name}.out", refs,
                                     tol["atol"], tol["rtol"],
                                     _STAGING if device.type == "cuda" else None,
                                     truth if isinstance(truth, list) or callable(truth)
                                     else None, slots)
        if isinstance(truth, str):
            diffs[name]["f64_skipped"] = truth
        truth = None  # a timed call's truth is not kept: freed before the next label
    result: dict = {"seen": seen, "diffs": diffs, "tolerance": tol}
    if payload.get("metrics"):
        with spent("metrics"):
            result["metrics"] = _floor_metrics(p, payload, device)
    if payload.get("timing") is not None:
        timed = baseline_model(p, payload, device)
        if isinstance(timed, str):
            result["timing_error"] = timed
        else:
            settings = TimingSettings.model_validate(payload["timing"])
            result["timing"] = time_model(timed, p.module, payload["seed"],
                                          payload["precision"], device, settings).model_dump()
    del refs, truth
    release(device)
    return result


def time_rounds(payload: dict, device: torch.device) -> dict:
    """The rounds `rounds` of a paired timing (schedule/pairing.py), back to back: the
    ones due at one handshake, in one call (on the H200 each server call cost ~1.5 ms
    of the candidate's timing step; one call per round made twenty a sample). Each round
    makes its calls of the reference, each on fresh inputs drawn before its clock
    starts, here where no candidate code runs; the candidate's child is stopped
    meanwhile. One untimed call first (the candidate's rounds start the same way; none
    with `round_untimed` off), and the run's warmup before the first round. {"rounds":
    one answer per round}, or {"error": why not}.

    The stopped candidate keeps its device memory. Out of memory beside it, a round is
    tried once more with what this server only caches given back (reference outputs,
    allocator blocks); out of memory again, the answer says so and the sample keeps its
    unpaired timing (the H100, KernelBench level 1: three 8 GiB problems whose children
    held 25 GiB each; the server survives such an error, references._out_of_memory)."""
    answers = []
    for i, r in enumerate(payload["rounds"]):
        def one_round(r=r, first=i == 0) -> dict:
            inject_fault("round_oom", torch.OutOfMemoryError)
            return _time_round(payload, device, int(r), wait_quiet=first)

        try:
            answers.append(with_room(one_round, device, give_back=_give_back_cached))
        except torch.OutOfMemoryError as e:
            short = str(e).splitlines()[0][:200]
            return {"error": f"out of device memory beside the stopped candidate: {short}"}
        if "error" in answers[-1]:
            return answers[-1]
    return {"rounds": answers}


def _give_back_cached(device: torch.device) -> None:
    """Drop every kept reference output and float64 truth (they are recomputed when next
    needed) and return the allocator's cached blocks."""
    for p in _LOADED.values():
        p.forget_outputs()
    release(device, force=True)


def _time_round(payload: dict, device: torch.device, r: int, wait_quiet: bool) -> dict:
    entered, spent_before = clocks.perf_counter(), SPENT.copy()
    p = _problem(payload, device)
    settings = TimingSettings.model_validate(payload["timing"])
    module, seed, precision = p.module, payload["seed"], payload["precision"]

    timed = baseline_model(p, payload, device)
    if isinstance(timed, str):  # the compiler's limit: an answer, not a failed server call
        return {"error": f"no {payload.get('baseline_mode')} baseline: {timed}"}
    # Kernels the stopped candidate queued may still run: wait them out, so that they
    # never slow the reference's round, and report how long (phases.pair_busy_max). Once
    # per call: the candidate stays stopped until its last round has ended.
    with spent("quiet"):
        busy_ms = busy_ms_before_quiet(device) if wait_quiet and device.type == "cuda" else 0.0
    # Around each call, the candidate child's own bookkeeping (calls.py: on a host-bound
    # problem that work slows the next call, so both sides do it). Not the full tripwire
    # check after the round's last call: no timed call follows it in the round, and here,
    # where no candidate code runs, it finds nothing (1.4 ms a round on the H100, 28 ms of
    # each sample's timing step).
    rounds = paired_rounds(settings)
    calls_r = rounds[r]
    calls = TimedCalls(timed, p.watch(device), device,
                       lambda i: (None, inputs_for(module, seed, ("timing", i), precision,
                                                   device)),
                       set(), len(calls_r), candidate=False)
    untimed = int(settings.round_untimed)  # the round's own untimed call, as the candidate's
    with torch.no_grad():
        with spent("untimed"):
            for i in range(untimed + (settings.warmup if r == 0 else 0)):
                started = clocks.perf_counter()  # the last one is the round's untimed call
                calls.call(*calls.args(-1 - i))
                calls.untimed_ended()
            sync(device)
        # the spin-up counts the round's untimed call (not the warmups), as the candidate's
        timer = round_timer(device, settings, clocks.perf_counter() - started if untimed else 0.0)
        take_launch_ms(timer)
        ms = kept(settings, r, time_calls(calls.call, calls_r, timer, calls.args,
                                          calls.on_output, collect=r == 0))
    # The blocks this round's calls used stay cached until the last round: given back
    # after every round, each next round's first call ran on memory freshly mapped (a
    # 6.4 GB elementwise call on the H100: 4.96 ms instead of 4.27), which the candidate,
    # whose allocator keeps its blocks, never pays. They are what the round already held
    # beside the stopped candidate; the next request of any other kind releases them.
    if r == len(rounds) - 1:
        release(device)
    SPENT["server"] += clocks.perf_counter() - entered
    return {"ms": ms, "busy_ms": busy_ms, "launch_ms": take_launch_ms(timer),
            "spent": spent_since(spent_before)}


def estimate_call(payload: dict, device: torch.device) -> dict:
    """{"ms": a rough time of one call of what paired rounds time (the baseline model),
    "launch_ms": the part of it until the call returned (its launches, on a GPU), or
    None}: the second of two synchronized calls, by the host's clock. It sizes each
    sample's timed calls (timing.budgeted): never a figure that is scored, so it is
    taken beside other children's untimed work, whose noise only moves that count."""
    p = _problem(payload, device)
    timed = baseline_model(p, payload, device)
    if isinstance(timed, str):
        return {"ms": None}
    inputs = inputs_for(p.module, payload["seed"], ("timing", -1), payload["precision"], device)
    with torch.no_grad():
        for _ in range(2):
            started = clocks.perf_counter()
            timed(*inputs)
            returned = clocks.perf_counter()
            sync(device)
    ms = (clocks.perf_counter() - started) * 1e3
    del inputs
    release(device)
    return {"ms": ms, "launch_ms": (returned - started) * 1e3 if device.type == "cuda" else None}


def baseline_model(p: Problem, payload: dict, device: torch.device):
    """What a live baseline times: the reference itself (eager), or the reference compiled
    as `payload["baseline_mode"]` asks (torch.compile, TVM), built once per problem and
    mode here, on the problem's own inputs; a string says why the compiler could not."""
    mode = payload.get("baseline_mode") or "eager"
    if mode == "eager":
        return p.model
    if mode not in p.compiled:
        try:
            if is_tvm_mode(mode):
                p.compiled[mode] = tvm_callable(p.model, p.module, payload["seed"],
                                                payload["precision"], device, mode)[0]
            else:
                p.compiled[mode] = compile_model(p.model, mode.removeprefix("compile-"))
        except Exception as e:  # noqa: BLE001 - the compiler's limit, nobody's fault
            p.compiled[mode] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return p.compiled[mode]


def with_room(call, device: torch.device, give_back=None):
    """`call()`, once more after `give_back(device)` if it ran out of memory; by default
    after giving the allocator's cached blocks back, on a GPU only: on the H100 a 16 GiB
    KernelBench input's float64 run failed to get 32 GiB with 31.9 GiB cached but split
    in smaller blocks (an OOM of ours, not the problem's)."""
    try:
        return call()
    except torch.OutOfMemoryError:
        if give_back is None and device.type != "cuda":
            raise
    (give_back or (lambda d: release(d, force=True)))(device)
    return call()


def _reset_peak(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _note_peak(p: Problem, device: torch.device, before: int) -> None:
    """The most device memory one forward took above what was held before it (its
    inputs were drawn just before, so they are not counted here: added by the plan)."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
        p.peak_bytes = max(p.peak_bytes or 0, peak)


def release(device: torch.device, force: bool = False) -> None:
    """Give the device back what this process does not keep: a candidate runs next on
    the same GPU and must find the memory a user would expect free. Cached allocator
    blocks beyond the kept outputs go back to the driver (a few ms; skipped when small)."""
    if device.type != "cuda":
        return
    kept = sum(p.bytes for p in _LOADED.values())
    if force or torch.cuda.memory_reserved(device) > kept + RELEASE_SLACK:
        # A full collection only when forced (a retry after an OOM): with several problems
        # loaded it took ~0.15 s, after every paired round. What a call drew is freed by
        # reference counting, and the cache holds only blocks nothing uses.
        if force:
            gc.collect()
        torch.cuda.empty_cache()


def plan_problem(payload: dict, device: torch.device) -> dict:
    """What the memory plan needs, allocating nothing of the problem's size: the bytes of
    its inputs and outputs (from `get_inputs` and a forward on the meta device, where
    tensors have shapes but no memory; or `payload["sizes"]`, kept from an earlier run:
    references.py), its weights, and what the device offers once this process has
    released what it does not keep. `release` with `drop=True` first when asked (a retry
    after a candidate ran out of memory)."""
    if payload.get("drop"):
        _LOADED.clear()
    release(device, force=bool(payload.get("drop")))
    plan = dict(payload.get("sizes") or {}) or _problem_sizes(payload, device)
    if device.type == "cuda":
        plan["free_bytes"], plan["total_bytes"] = torch.cuda.mem_get_info(device)
        plan["reserved_bytes"] = torch.cuda.memory_reserved(device)  # this server's own
    return plan


def _problem_sizes(payload: dict, device: torch.device) -> dict:
    """The bytes of the problem's inputs, outputs and weights, from the meta device."""
    module, init = load_problem(payload["problem_code"], payload["precision"], device)
    plan: dict = {"in_bytes": None, "out_bytes": None}
    dtype = precision_dtype(payload["precision"])
    try:
        _meta_ready()  # its imports (seconds) before any meta op and the bounded forward
        meta_inputs = make_inputs(module.get_inputs, 0, "meta", dtype)
        plan["in_bytes"] = tensor_bytes(meta_inputs)
        with torch.device("meta"):
            model = module.Model(*make_init_inputs(module.get_init_inputs, "meta"))
            model = model.to(dtype=dtype)
            plan["weights_bytes"] = sum(tensor_bytes(t) for t in model.state_dict().values())
            plan["itemsize"] = dtype.itemsize
            shape_only_rnns(model)  # else decomposed op by op: seconds (meta_rnn.py)
            with within(META_FORWARD_MAX_S):
                out = model(*meta_inputs)
        plan["out_bytes"] = tensor_bytes(output_tensors(out))
    except Exception as e:  # noqa: BLE001 - an op without a meta kernel: sizes unknown
        plan["meta_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return plan


# On the meta device an op without a meta kernel of its own runs decomposed, op by op in
# Python: KernelBench's 6-layer LSTMs took 8-17 s of the reference server's time in their
# plan (H100 and 2-core CPU alike), where other problems' plans take milliseconds (their
# recurrent layers now answer with shapes alone: meta_rnn.py). Past this bound, the
# outputs' size stays unknown, as for an op with no meta support at all.
META_FORWARD_MAX_S = 2.0


@functools.cache
def _meta_ready() -> None:
    """The meta device's first op imports its Python kernels and, through them,
    torch._dynamo (1 s on the 2-core CPU, 4-7 s in a fresh H100 machine's server): done
    before the bounded forward, or a fresh server's first plan ran out of time and lost
    its outputs' size (the H100's device-buffer test caught it). Paid by the first plan
    whose sizes were not kept (references.KeptSizes), not at the server's start: a run
    whose problems were all planned before never pays it (on the H100, a run of 100
    cached candidates waited ~8 s for its first plan, about half of it this)."""
    torch.ones(2, device="meta").add(1)


def warm_up() -> None:
    """Run by the server's start-up (kb_eval/isolation/child.py), before its first task:
    the fingerprints' multipliers (probes.host_weights), which its first comparison would
    otherwise draw with the device held."""
    host_weights()


class _TooLong(Exception):
    pass


@contextlib.contextmanager
def within(seconds: float):
    """Raise _TooLong in the block once it has run `seconds` (a timer signal: the main
    thread only, where the server runs its tasks; elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _TooLong(f"over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _floor_metrics(p: Problem, payload: dict, device: torch.device) -> dict:
    """What the physical floor needs of the problem, measured where no candidate code
    runs: the bytes a call reads and writes, and (GPU) the L2 size. Nothing here is timed,
    so it runs beside other samples' untimed work; the device's own figures (an empty
    call's time, a copy's bandwidth) are `device_floor`'s."""
    try:
        inputs = inputs_for(p.module, payload["seed"], ("correct", 0), payload["precision"],
                            device)
        with torch.no_grad():
            out = p.model(*inputs)
        sync(device)
        l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
        outs = output_tensors(out)
        deterministic = None if p.first is None else fingerprints(outs) == p.first
        in_bytes, out_bytes = tensor_bytes(list(inputs)), tensor_bytes(outs)
        peak = None if p.peak_bytes is None else in_bytes + p.peak_bytes
        launches = (count_or_error(lambda: p.model(*inputs), device)  # once per problem
                    if payload.get("count_launches") else None)
        return {"in_bytes": in_bytes, "out_bytes": out_bytes, "peak_bytes": peak,
                "launches": launches, "deterministic": deterministic, "l2_bytes": l2}
    except Exception as e:  # noqa: BLE001 - no floor then, but the outputs still count
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def device_floor(timing: dict, device: torch.device) -> dict:
    """The floor's figures of the device, the same for every problem: an empty call's
    time through the run's timer (`timing`: its settings) and (GPU) a device copy's
    bandwidth. Timed: the parent asks once per device and run, holding the device alone.
    Measured with every problem's first comparison before, that comparison held the
    device alone whole (its reference runs and judging too: all 250 of a KernelBench
    levels 1-3 sweep's comparisons)."""
    try:
        settings = TimingSettings.model_validate(timing)
        return {"empty_call_ms": empty_call_ms(device, settings, []),
                "copy_bytes_per_s": copy_bandwidth(device)}
    except Exception as e:  # noqa: BLE001 - no device figures then: the floor uses fewer
        return {"error": f"{type(e).__name__}: {e}"[:300]}
