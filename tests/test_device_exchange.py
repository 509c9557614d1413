"""Outputs handed over on the GPU (kb_eval/eval/wire/device.py, schedule/exchange.py).

CPU: the header-only file's checks, with CPU tensors standing in for the server's
buffers, and when the plan chooses buffers over files. GPU: a child process copies into
buffers another process exported, fresh buffers hold no earlier data, and whole samples
judged through buffers (a right and a wrong CUDA candidate, a reference copy)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.judge.correctness import judge_file
from kb_eval.eval.schedule.memplan import MemoryPlan
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.eval.schedule.exchange import checked_calls, exchange_bytes
from kb_eval.eval.wire import outputs
from kb_eval.eval.wire.device import slot_size
from kb_eval.problems import load_problems, reference_copy
from kb_eval.timing import TimingSettings

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ------------------------------------------------------------------ header-only files (CPU)
def test_header_names_a_slot_and_the_reader_views_it(tmp_path):
    out = [torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.ones(5, dtype=torch.int64)]
    slots = [torch.zeros(1 << 12, dtype=torch.uint8) for _ in range(2)]
    at = 0
    for t in out:  # what Slots.put lays out in slot 1
        b = t.reshape(-1).view(torch.uint8)
        slots[1][at:at + b.numel()] = b
        at += outputs.aligned(b.numel())
    outputs.write_header(tmp_path / "correct_0.out", out, 1)
    got = outputs.read(tmp_path / "correct_0.out", 1 << 20, None, slots)
    assert [g.dtype for g in got] == [torch.float32, torch.int64]
    assert torch.equal(got[0], out[0]) and torch.equal(got[1], out[1])
    # a view, not a copy: the comparison reads the buffer itself
    assert got[0].untyped_storage().data_ptr() == slots[1].untyped_storage().data_ptr()


@pytest.mark.parametrize("slot, shape, slots, why", [
    (2, [4], 2, "names no buffer"),  # past the sample's buffers
    (-1, [4], 2, "names no buffer"),
    (True, [4], 2, "names no buffer"),  # JSON true is not a slot index
    (0, [1 << 20], 2, "places"),  # more bytes than the buffer holds
    (0, [4], 0, "names no buffer"),  # a header where the sample has no buffers (files)
])
def test_a_header_that_lies_is_unreadable(tmp_path, slot, shape, slots, why):
    t = torch.zeros(shape, dtype=torch.float32)
    outputs.write_header(tmp_path / "x.out", [t], slot)
    with pytest.raises(outputs.OutputsUnreadable, match=why):
        outputs.read(tmp_path / "x.out", 1 << 20, None,
                     [torch.zeros(4096, dtype=torch.uint8)] * slots)


def test_an_unreadable_header_judges_the_label_wrong(tmp_path):
    outputs.write_header(tmp_path / "correct_0.out", [torch.zeros(4)], 5)
    d = judge_file(tmp_path / "correct_0.out", [torch.zeros(4)], 1e-4, 1e-4, None, None,
                   [torch.zeros(4096, dtype=torch.uint8)])
    assert d["ok"] is False and "names no buffer" in d["error"]


# ------------------------------------------------------------------ the plan's choice (CPU)
def _ctx(tmp_path) -> EvalContext:
    return EvalContext.create(EvalConfig(backend="cpp", results_dir=tmp_path))


GB = 10 ** 9


@pytest.mark.parametrize("device, out, need, free, truth, buffers", [
    ("cuda:0", 6.4, 12.8, 79, 38.4, "all"),  # KernelBench v0.2 elementwise on an H100
    ("cpu", 6.4, 12.8, 79, 38.4, 0),  # a CPU: files
    ("cuda:0", 0.0005, 0.001, 79, 0.003, 0),  # small outputs: files
    ("cuda:0", 8.6, 25.8, 79, 77.0, 0),  # no room beside the float64 truth
    ("cuda:0", 8.6, 25.8, 79, None, 0),  # room for one buffer beside the child: files
    ("cuda:0", 8.6, 17.2, 79, 51.6, 2),  # a KernelBench L1Norm: two of its four calls
    ("cuda:0", 1.0, 2.0, 79, None, "all"),
    ("cuda:0", 0.01, 0.02, 79, None, 0),  # 70 trials: more buffers than MAX_SLOTS
])
def test_buffers_only_where_the_plan_has_room(tmp_path, device, out, need, free, truth,
                                              buffers):
    ctx = _ctx(tmp_path)
    plan = MemoryPlan(need_bytes=int(need * GB), free_bytes=int(free * GB),
                      out_bytes=int(out * GB), truth_bytes=None if truth is None else int(truth * GB))
    trials = 70 if out == 0.01 else 2
    got = exchange_bytes(ctx, plan, trials, device)
    n = checked_calls(ctx, trials, plan.out_bytes)
    assert got == (n if buffers == "all" else buffers) * slot_size(plan.out_bytes)
    if buffers:  # the trials, the re-checks 4 GiB allow (at least one), the probe
        assert n == trials + max(1, min(ctx.config.recheck_timed, (4 << 30) // plan.out_bytes)) + 1


def test_plan_counts_memory_that_samples_in_flight_hold_as_free():
    """At lane depth 3 the plan of a problem may be taken while neighbours' children and
    buffers hold device memory: the plan must see the device as the evaluator idle
    offers it, or a large problem loses its device buffers (and maybe its float64
    truth) for having come second."""
    from kb_eval.eval.schedule.memplan import IdleMemory

    idle = IdleMemory()
    total = 80 * GB
    first = idle.free("cuda:0", {"total_bytes": total, "free_bytes": 78 * GB,
                                 "reserved_bytes": 1 * GB})
    assert first["free_bytes"] == 78 * GB  # 1 GB of contexts not ours
    # neighbours took 40 GB; the server keeps 2 GB now
    busy = idle.free("cuda:0", {"total_bytes": total, "free_bytes": 37 * GB,
                                "reserved_bytes": 2 * GB})
    assert busy["free_bytes"] == 77 * GB
    assert idle.free("cuda:1", {"total_bytes": total, "free_bytes": 30 * GB,
                                "reserved_bytes": 0})["free_bytes"] == 30 * GB
    assert idle.free("cuda:0", {"free_bytes": 5})["free_bytes"] == 5  # a CPU: as is


# ------------------------------------------------------------------ on a GPU
CHILD = textwrap.dedent("""
    import json, sys, torch
    from pathlib import Path
    from kb_eval.eval.wire.device import Slots
    spec = json.loads(sys.argv[1])
    slots = Slots(spec, torch.device("cuda:0"))
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    unopened = slots.put(Path(sys.argv[2]) / "z.out", [x])  # not opened (and filled): files
    slots.open()
    a = slots.put(Path(sys.argv[2]) / "a.out", [x])
    b = slots.put(Path(sys.argv[2]) / "b.out", [x, x[:10] * 2])
    # the bytes the put copied, as the settle check compares them
    put_bytes = [t.reshape(-1).view(torch.uint8) for t in (x, x[:10] * 2)]
    copied = len(slots.last_bytes) == 2 and all(
        torch.equal(c, p) for c, p in zip(slots.last_bytes, put_bytes))
    print(unopened, a, b, slots.put(Path(sys.argv[2]) / "c.out", [x]),  # no third: False
          copied)
""")

# A child that only opens its buffers (as the worker's setup does, before candidate code)
OPEN_ONLY = textwrap.dedent("""
    import json, sys, torch
    from kb_eval.eval.wire.device import Slots
    Slots(json.loads(sys.argv[1]), torch.device("cuda:0")).open()
""")


@pytest.mark.gpu
@GPU
def test_a_child_copies_into_buffers_the_server_exported(tmp_path):
    from kb_eval.eval.wire.device import Exported

    import json

    exported = Exported(2, slot_size(8 << 20), torch.device("cuda:0"))
    try:
        views = exported.views()
        spec = {"handles": exported.handles, "bytes": exported.nbytes}
        p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert p.stdout.split() == ["False", "True", "True", "False", "True"], p.stdout
        assert not (tmp_path / "z.out").exists()
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        a = outputs.read(tmp_path / "a.out", 1 << 20, None, views)
        b = outputs.read(tmp_path / "b.out", 1 << 20, None, views)
        assert torch.equal(a[0], x) and torch.equal(b[0], x) and torch.equal(b[1], x[:10] * 2)
        # a header with no copy behind it reads the fill the child made when it opened
        # its buffers: NaN, never a stale output
        exported2 = Exported(1, slot_size(8 << 20), torch.device("cuda:0"))
        exported2.views()[0].copy_(torch.zeros(exported2.nbytes, dtype=torch.uint8))
        spec2 = {"handles": exported2.handles, "bytes": exported2.nbytes}
        p = subprocess.run([sys.executable, "-c", OPEN_ONLY, json.dumps(spec2)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        outputs.write_header(tmp_path / "d.out", [x], 0)
        d = outputs.read(tmp_path / "d.out", 1 << 20, None, exported2.views())
        assert bool(d[0].isnan().all())
        exported2.free()
    finally:
        exported.free()


@pytest.mark.gpu
@GPU
def test_a_short_device_hands_over_as_many_buffers_as_fit():
    """Exported with `at_least`: the buffers that fit, if that many; without it, all or an
    error. The server's export, beside timing steps, gives nothing back and answers
    `short`; asked again with `give_back` (a shared turn), it gives back what it keeps
    first, then asks so (reference_worker.export_buffers)."""
    from kb_eval.eval.judge import reference_worker
    from kb_eval.eval.wire.device import CudaError, Exported

    device = torch.device("cuda:0")
    size = slot_size(1 << 30)
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    hog = torch.empty(free - int(2.5 * size), dtype=torch.uint8, device=device)
    try:
        with pytest.raises(CudaError):
            Exported(4, size, device)
        with pytest.raises(CudaError):
            Exported(4, size, device, at_least=3)
        some = Exported(4, size, device, at_least=2)
        assert len(some.handles) == len(some.views()) == 2
        some.free()
        spec = {"key": "short", "n": 4, "bytes": size, "at_least": 2}
        assert reference_worker.export_buffers(spec, device)["short"] is True
        answer = reference_worker.export_buffers({**spec, "give_back": True}, device)
        assert len(answer["handles"]) == 2, answer
        reference_worker.free_buffers("short")
        answer = reference_worker.export_buffers({**spec, "at_least": 3, "give_back": True},
                                                 device)
        assert "error" in answer and "short" not in answer
    finally:
        del hog
        torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.slow
@GPU
def test_buffers_a_child_cannot_open_mean_files(tmp_path, build_cache_dir, monkeypatch):
    """A child that cannot open (and fill) the buffers handed over ends before candidate
    code (the server would read a buffer a header names, unfilled: an earlier reference
    output of the same trial may be there); the sample is evaluated again through files
    and judged as ever."""
    from kb_eval.faults import VAR

    src = tmp_path / "problems" / "level1"
    src.mkdir(parents=True)
    (src / "1_ScaleAddLarge.py").write_text(large_problem())
    problem = load_problems(str(tmp_path / "problems"))[0]
    faults = tmp_path / "faults"
    faults.mkdir()
    monkeypatch.setenv(VAR, str(faults))
    cfg = EvalConfig(backend="cuda", live_baseline=True, timing=TimingSettings(warmup=3, trials=20),
                     cache_dir=build_cache_dir, results_dir=tmp_path / "r", run_timeout_s=300)
    for armed in ("once", "always"):
        (faults / "exchange_open").write_text(armed)
        [record] = evaluate([(problem, 0, reference_copy(problem))], cfg)
        assert record.status == "correct", record
        assert "export" in record.phases and not record.retried
        # fired (once: removed); the files' try hands over no buffers, so never again
        assert (faults / "exchange_open").exists() == (armed == "always")
    shutil.rmtree(tmp_path / "r", ignore_errors=True)


def large_problem() -> str:
    """The test suite's ScaleAdd at 2048 x 2048 (16 MB outputs: handed over on the device)."""
    text = (kit.PROBLEMS / "level1" / "1_ScaleAdd.py").read_text()
    assert "torch.randn(64, 128)" in text
    return text.replace("torch.randn(64, 128)", "torch.randn(2048, 2048)")


@pytest.mark.gpu
@pytest.mark.slow
@GPU
def test_samples_judged_through_device_buffers(tmp_path, build_cache_dir):
    src = tmp_path / "problems" / "level1"
    src.mkdir(parents=True)
    (src / "1_ScaleAddLarge.py").write_text(large_problem())
    problem = load_problems(str(tmp_path / "problems"))[0]
    pairs = [(problem, s, kit.source_of(kit.GPU / f"level1_problem1_sample{s}.py"))
             for s in (0, 1)] + [(problem, 2, reference_copy(problem))]
    cfg = EvalConfig(backend="cuda", live_baseline=True, timing=TimingSettings(warmup=3, trials=20),
                     recheck_timed=2, cache_dir=build_cache_dir, results_dir=tmp_path / "r",
                     run_timeout_s=300, extra_env={"PATH": kit.wrapper_path()})
    records = {r.sample: r for r in evaluate(pairs, cfg)}
    for r in records.values():
        assert "export" in r.phases, r.phases  # buffers, not files
    assert records[0].status == "correct", records[0]
    assert records[0].correctness.trials == 5 + 2
    assert records[1].status == "incorrect" and "values beyond" in records[1].error
    assert records[2].status == "correct", records[2]
    shutil.rmtree(tmp_path / "r", ignore_errors=True)
