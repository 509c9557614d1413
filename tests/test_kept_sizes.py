"""The memory plan's sizes kept across runs (memplan.KeptSizes) and the reference
server's start-up warm-up in a thread of its own (reference_worker.warm_up): a run whose
problems were planned before answers its plans without the meta device's forward, and
nothing that times runs beside the warm-up's imports."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from kb_eval.eval.config import EvalConfig
from kb_eval.eval.judge import reference_worker
from kb_eval.eval.judge.references import ReferenceStore
from kb_eval.eval.schedule.memplan import KeptSizes
from kb_eval.eval.schedule.context import EvalContext
from kb_eval.problems import Problem

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 8)

    def forward(self, x):
        return self.lin(x)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''
SIZES = {"in_bytes": 64 * 32 * 4, "out_bytes": 64 * 8 * 4,
         "weights_bytes": (32 * 8 + 8) * 4, "itemsize": 4}


def test_sizes_are_kept_by_code_precision_and_toolchain(tmp_path):
    kept = KeptSizes(tmp_path, "toolchain-a")
    assert kept.get(PROBLEM, "fp32") is None
    kept.put(PROBLEM, "fp32", {**SIZES, "free_bytes": 123})  # the live figures are not kept
    assert kept.get(PROBLEM, "fp32") == SIZES
    assert kept.get(PROBLEM, "fp16") is None
    assert KeptSizes(tmp_path, "toolchain-b").get(PROBLEM, "fp32") is None
    assert kept.get(PROBLEM + "\n# another problem\n", "fp32") is None


def test_sizes_that_did_not_come_out_whole_are_not_kept(tmp_path):
    kept = KeptSizes(tmp_path, "t")
    kept.put(PROBLEM, "fp32", {**SIZES, "meta_error": "NotImplementedError: no meta kernel"})
    kept.put(PROBLEM, "fp16", {**SIZES, "out_bytes": None})
    assert kept.get(PROBLEM, "fp32") is None and kept.get(PROBLEM, "fp16") is None


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"in_bytes": 1}',
                                  '{"in_bytes": -1, "out_bytes": 1, "weights_bytes": 1, '
                                  '"itemsize": 4}',
                                  '{"in_bytes": true, "out_bytes": 1, "weights_bytes": 1, '
                                  '"itemsize": 4}'])
def test_a_file_that_does_not_read_back_as_sizes_is_ignored(tmp_path, text):
    kept = KeptSizes(tmp_path, "t")
    kept.put(PROBLEM, "fp32", SIZES)
    kept._path(PROBLEM, "fp32").write_text(text)
    assert kept.get(PROBLEM, "fp32") is None


def test_a_plan_with_kept_sizes_runs_no_problem_code():
    broken = "raise RuntimeError('the problem was imported')\n"
    plan = reference_worker.compare_sample(
        {"plan": True, "problem_code": broken, "device": "cpu", "precision": "fp32",
         "sizes": SIZES}, None)
    assert plan == SIZES
    with pytest.raises(RuntimeError, match="the problem was imported"):
        reference_worker.compare_sample(
            {"plan": True, "problem_code": broken, "device": "cpu", "precision": "fp32"}, None)


def test_a_second_run_plans_from_the_kept_sizes(tmp_path):
    problem = Problem(source="kept-test", level=1, problem_id=1, name="Lin", code=PROBLEM)
    plans = []
    for run in range(2):
        ctx = EvalContext.create(EvalConfig(backend="cpp", results_dir=tmp_path / "results",
                                            cache_dir=tmp_path / "cache"))
        store = ReferenceStore(ctx)
        sent = []
        call = store._call
        store._call = lambda device, payload: (sent.append(dict(payload)),
                                               call(device, payload))[1]
        try:
            plans.append(store.plan(problem, "cpu"))
        finally:
            store.close()
        assert sent[0]["sizes"] == (None if run == 0 else SIZES)
    assert plans[0].need_bytes == plans[1].need_bytes == SIZES["in_bytes"] + SIZES["out_bytes"]
    assert plans[1].truth_bytes == plans[0].truth_bytes


def test_the_servers_start_and_a_kept_plan_never_import_dynamo():
    """The meta device's first op imports torch._dynamo (seconds on the H100): a server
    whose plans were all kept never pays it; one that must plan does, at that plan."""
    script = f"""
import sys
from kb_eval.eval.judge import reference_worker as rw
rw.warm_up()
payload = {{"plan": True, "problem_code": {PROBLEM!r}, "device": "cpu", "precision": "fp32"}}
assert rw.compare_sample({{**payload, "sizes": {SIZES!r}}}, None) == {SIZES!r}
before = "torch._dynamo" in sys.modules
plan = rw.compare_sample(payload, None)
print(before, "torch._dynamo" in sys.modules, plan["out_bytes"])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", str(SIZES["out_bytes"])]


def test_calls_that_start_a_sample_get_the_server_before_those_that_end_one():
    from kb_eval.eval.judge.server_turns import ServerTurns

    turns, order = ServerTurns(), []
    release = threading.Event()

    def call(name, payload, hold=None):
        with turns.held(payload):
            order.append(name)
            if hold is not None:
                hold.wait(5)
    busy = threading.Thread(target=call, args=("round", {"time_calls": True}, release))
    busy.start()
    while not order:
        time.sleep(0.001)
    ending = threading.Thread(target=call, args=("compare", {"compare": {}}))
    ending.start()
    while not turns.cond._waiters:  # the comparison queues first
        time.sleep(0.001)
    starting = threading.Thread(target=call, args=("export", {"export": {"n": 1}}))
    starting.start()
    while turns.first_waiting == 0:
        time.sleep(0.001)
    release.set()
    for t in (busy, ending, starting):
        t.join(5)
    assert order == ["round", "export", "compare"]


def test_an_export_of_output_buffers_does_not_wait_for_a_timed_region(tmp_path):
    """An export launches no kernel (wire/device.Exported): it runs beside a neighbour's
    timing step, holding nothing, where a plan waits for the device, and so does an
    export that gives back what the server keeps (the reference rounds of that timing
    step keep theirs to the end)."""
    from kb_eval.devlock import DeviceLock

    ctx = EvalContext.create(EvalConfig(backend="cpp", results_dir=tmp_path / "results",
                                        cache_dir=tmp_path / "cache"))
    store = ReferenceStore(ctx)
    timing = DeviceLock(ctx.lock_path("cpu"))
    timing.acquire("exclusive")  # a candidate's timing step
    try:
        answered = {}

        def call(name, payload):
            answered[name] = store._call("cpu", {**payload, "device": "cpu"})
        export = threading.Thread(target=call, args=("export", {"export": {
            "key": "k", "n": 1, "bytes": 1 << 20}}))
        export.start()
        export.join(120)
        assert "export" in answered  # answered (a CPU has no buffers: an error) at once
        plan = threading.Thread(target=call, args=("plan", {
            "plan": True, "problem_code": PROBLEM, "precision": "fp32", "sizes": SIZES}))
        giving_back = threading.Thread(target=call, args=("give_back", {"export": {
            "key": "k", "n": 1, "bytes": 1 << 20, "give_back": True}}))
        plan.start()
        giving_back.start()
        plan.join(0.5)
        giving_back.join(0.1)
        assert plan.is_alive() and giving_back.is_alive()  # they wait for the timing step
    finally:
        timing.release()
        plan.join(60)
        giving_back.join(60)
        store.close()
    assert answered["plan"].ok and answered["give_back"].ok
