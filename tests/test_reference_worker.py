"""The reference server's work, called in-process on the CPU: each output compared with
the candidate's file, and a problem's fixed outputs computed once for all its samples."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from kb_eval.eval.wire import outputs
from kb_eval.eval.judge import correctness, reference_worker
from kb_eval.eval.judge.loaded import LOADED
from kb_eval.eval.schedule import memplan_server
from kb_eval.eval.wire.labels import label_name
from kb_eval.harness import inputs_for
from kb_eval.inputs import make_inputs

PROBLEM = '''
import torch
import torch.nn as nn

CALLS = [0]


class Model(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        return x * 3


def get_inputs():
    return [torch.randn(6, 4)]


def get_init_inputs():
    return []
'''
SEED = 1234


def _payload(folder, labels, keep_bytes=1 << 20) -> dict:
    return {"problem_code": PROBLEM, "device": "cpu", "precision": "fp32", "seed": SEED,
            "labels": labels, "compare": {"folder": str(folder), "atol": 1e-4, "rtol": 1e-4},
            "timing": None, "metrics": False, "keep_bytes": keep_bytes}


def _candidate_files(folder, labels, wrong=()) -> None:
    """What a candidate child would have written: 3x its inputs (minus one where wrong)."""
    module = type("M", (), {"get_inputs": staticmethod(lambda: [torch.randn(6, 4)])})
    for kind, i, *seed in labels:
        x = (make_inputs(module.get_inputs, seed[0], "cpu", torch.float32) if seed else
             inputs_for(module, SEED, (kind, i), "fp32", torch.device("cpu")))[0]
        if kind == "shape":
            x = x[:-1]
        name = label_name((kind, i, *seed))
        outputs.write(folder / f"{name}.out", [x * 3 - float(name in wrong)])


@pytest.fixture(autouse=True)
def fresh_server_state():
    LOADED.clear()
    yield
    LOADED.clear()


def _calls() -> int:
    (problem,) = LOADED.values()
    return problem.module.CALLS[0]


def test_fixed_outputs_computed_once_timed_ones_every_sample(tmp_path):
    fixed = [["correct", 0], ["correct", 1], ["shape", 0]]
    first = fixed + [["timing", 3, 77]]
    _candidate_files(tmp_path, first, wrong={"correct_1"})
    r = reference_worker.compare_sample(_payload(tmp_path, first), tmp_path)
    assert _calls() == 4
    assert {k: d["ok"] for k, d in r["diffs"].items()} == {
        "correct_0": True, "correct_1": False, "shape_0": True, "timing_3_4d": True}
    assert r["seen"]["correct_1"]["same_as_first"] is False

    second = fixed + [["timing", 9, 78]]
    _candidate_files(tmp_path, second)
    r = reference_worker.compare_sample(_payload(tmp_path, second), tmp_path)
    assert _calls() == 5  # only the new timed call ran
    assert all(d["ok"] for d in r["diffs"].values()) and len(r["diffs"]) == 4
    assert r["seen"]["correct_1"]["same_as_first"] is False  # kept with the outputs


def test_an_output_equal_to_the_reference_needs_no_float64_run(tmp_path):
    """A label's float64 truth runs only when the candidate's output differs from the
    reference's (equal ones pass the float64 rule whatever the truth), the first
    correctness trial's too, so each label's forward runs twice or once."""
    labels = [["correct", 0], ["correct", 1], ["correct", 2], ["timing", 3, 77],
              ["timing", 5, 79]]
    _candidate_files(tmp_path, labels, wrong={"timing_5_4f", "correct_2"})
    payload = _payload(tmp_path, labels)
    payload["compare"].update(truth=True, rule="f64")
    r = reference_worker.compare_sample(payload, tmp_path)
    assert _calls() == 1 + 1 + 2 + 1 + 2
    f64 = {k: d["f64"] for k, d in r["diffs"].items()}
    for equal in ("correct_0", "correct_1", "timing_3_4d"):
        assert f64[equal] == {"ok": True, "error": None, "ratio": None,
                              "norm_ratio": None, "identical": True}
    for wrong in ("correct_2", "timing_5_4f"):
        assert not f64[wrong]["ok"] and not r["diffs"][wrong]["ok"]

    # the next sample, wrong on correct_1: its truth is computed then, and kept
    _candidate_files(tmp_path, labels[:3], wrong={"correct_1"})
    r = reference_worker.compare_sample({**payload, "labels": labels[:3]}, tmp_path)
    assert _calls() == 7 + 1
    assert not r["diffs"]["correct_1"]["f64"]["ok"] and r["diffs"]["correct_2"]["f64"]["ok"]
    (problem,) = LOADED.values()
    assert {"correct_1", "correct_2"} <= set(problem.truth) and "correct_0" not in problem.truth


MUTATING = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x * 3
        x.add_(100.0)  # the reference changes its input after using it
        return y


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
"""


def test_the_truth_is_of_the_inputs_the_candidate_got(tmp_path, monkeypatch):
    """The float64 truth (computed once an output is beyond the reference's rounding)
    runs on the label's inputs drawn again, not on what the reference left of them: a
    candidate that computes 3x in float64 (a few ulps from the reference's fp32 3x)
    passes the float64 rule, and one a unit off everywhere fails. The shortcut is off
    here (every output faces the truth): a few ulps are within rounding."""
    monkeypatch.setattr(correctness, "within_rounding", lambda *args: False)
    module = type("M", (), {"get_inputs": staticmethod(lambda: [torch.randn(256, 64)])})
    labels = [["correct", 0], ["correct", 1]]
    for kind, i in labels:
        x = inputs_for(module, SEED, (kind, i), "fp32", torch.device("cpu"))[0]
        out = (x.double() * 3 + 1e-9 * x.double()).float()  # differs in some last bits
        outputs.write(tmp_path / f"{label_name((kind, i, None))}.out",
                      [out if i == 0 else out + 1.0])
    payload = {**_payload(tmp_path, labels), "problem_code": MUTATING}
    payload["compare"].update(truth=True, rule="f64")
    r = reference_worker.compare_sample(payload, tmp_path)
    good, bad = r["diffs"]["correct_0"], r["diffs"]["correct_1"]
    assert good["max_abs"] > 0 and "identical" not in good["f64"]
    assert good["f64"]["ok"], good["f64"]
    assert not bad["f64"]["ok"] and not bad["ok"]
    (problem,) = LOADED.values()
    assert set(problem.truth) == {"correct_0", "correct_1"}  # computed either way, kept


def test_nothing_kept_without_room(tmp_path):
    labels = [["correct", 0], ["correct", 1]]
    _candidate_files(tmp_path, labels)
    for _ in range(2):
        r = reference_worker.compare_sample(_payload(tmp_path, labels, keep_bytes=0), tmp_path)
        assert all(d["ok"] for d in r["diffs"].values())
    assert _calls() == 4


STATEFUL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Keeps its recurrent state as a plain attribute, which `.to(dtype)` does not convert."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(8, 4)
        self.state = torch.zeros(6, 4)

    def forward(self, x, start):
        self.state.copy_(start)
        self.state = torch.tanh(self.mix(torch.cat((x, self.state.to(x.device)), dim=1)))
        return self.state * 2


def get_inputs():
    return [torch.randn(6, 4), torch.randn(6, 4)]


def get_init_inputs():
    return []
'''


def test_a_stateful_reference_still_runs_after_its_float64_run(tmp_path):
    """The float64 truth ran the model widened; a state it kept in float64 made every later
    call at the run's precision fail (KernelBench level3/33 was reference_error on the
    H100). Each correctness trial is the reference run, then its float64 run."""
    labels = [["correct", 0], ["correct", 1], ["correct", 2]]
    for kind, i in labels:
        outputs.write(tmp_path / f"{label_name((kind, i, None))}.out", [torch.zeros(6, 4)])
    payload = _payload(tmp_path, labels)
    payload["problem_code"], payload["compare"]["truth"] = STATEFUL, True
    r = reference_worker.compare_sample(payload, tmp_path)
    assert set(r["diffs"]) == {"correct_0", "correct_1", "correct_2"}
    assert all("f64" in d and "f64_skipped" not in d for d in r["diffs"].values()), r["diffs"]
    (problem,) = LOADED.values()
    assert problem.model.state.dtype == torch.float32


def test_buffers_this_server_never_exported_are_ours_to_retry(tmp_path):
    """A comparison that names the sample's device buffers (wire/device.py) on a server
    that does not hold them (it was started again while the child ran) answers
    `exchange_lost` (the parent retries the sample: eval_error) and never judges the
    candidate's files: they hold headers whose bytes died with the old server."""
    labels = [["correct", 0]]
    _candidate_files(tmp_path, labels, wrong={"correct_0"})
    payload = _payload(tmp_path, labels)
    payload["compare"]["exchange"] = "4242:/gone/sample"
    assert reference_worker.compare_sample(payload, tmp_path) == {"exchange_lost": True}
    assert not LOADED  # no reference ran
    payload["compare"]["exchange"] = None  # files: judged as usual
    r = reference_worker.compare_sample(payload, tmp_path)
    assert r["diffs"]["correct_0"]["ok"] is False


def test_buffers_it_cannot_export_are_an_answer_not_a_failed_call(tmp_path):
    """More buffers than allowed (or none to allocate): the server answers with an error,
    the sample uses files, and the server goes on (a raised call would end it)."""
    got = reference_worker.export_buffers({"key": "k", "n": 65, "bytes": 1 << 20},
                                          torch.device("cpu"))
    assert "error" in got and "k" not in reference_worker.EXCHANGES


@pytest.mark.parametrize("untimed", [True, False])
def test_a_round_starts_with_one_untimed_call_unless_told_not_to(untimed):
    """TimingSettings.round_untimed: the reference's round r makes its kept calls, the
    run's warmup before round 0, and one untimed call at its head only when asked (the
    candidate's side does the same: tests/test_paired_timing.py)."""
    from kb_eval.timing import TimingSettings, paired_rounds

    settings = TimingSettings(warmup=3, trials=40, paired_rounds=20, round_spin_up_ms=0,
                              round_untimed=untimed)
    rounds = paired_rounds(settings)
    made = []
    for due in ([0], [1, 2]):  # as the pairing asks: round 0 alone, then two back to back
        before = _calls() if LOADED else 0
        out = reference_worker.compare_sample(
            {"time_calls": True, "rounds": due, "problem_code": PROBLEM, "device": "cpu",
             "precision": "fp32", "seed": SEED, "timing": settings.model_dump(),
             "baseline_mode": None}, None)
        assert [len(a["ms"]) for a in out["rounds"]] == [
            len(rounds[r]) - (1 if r == 0 else 0) for r in due]  # round 0: its discarded first
        made.append(_calls() - before)
    assert made == [3 + untimed + len(rounds[0]),
                    2 * untimed + len(rounds[1]) + len(rounds[2])]


SLOW_ON_META = '''
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(256))

    def forward(self, x):
        if x.is_meta:  # as an op decomposed step by step on the meta device
            time.sleep(30)
        return x * self.w


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return []
'''


def test_a_slow_meta_forward_leaves_the_outputs_size_unknown_within_the_limit():
    """KernelBench's LSTMs spent 8-17 s of the server in their plan's meta forward."""
    handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    plan = reference_worker.compare_sample(
        {"plan": True, "problem_code": SLOW_ON_META, "device": "cpu", "precision": "fp32"},
        None)
    took = time.monotonic() - started
    assert took < memplan_server.META_FORWARD_MAX_S + 5
    assert plan["out_bytes"] is None and "_TooLong" in plan["meta_error"]
    assert plan["in_bytes"] == 8 * 256 * 4 and plan["weights_bytes"] == 256 * 4
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left armed
    assert signal.getsignal(signal.SIGALRM) is handler
    # a quick one is untouched
    plan = reference_worker.compare_sample(
        {"plan": True, "problem_code": PROBLEM, "device": "cpu", "precision": "fp32"}, None)
    assert plan["out_bytes"] == 6 * 4 * 4 and "meta_error" not in plan


def test_a_fresh_servers_first_plan_knows_its_outputs_size():
    """The meta device's first op imports its kernels (1 s on the 2-core CPU): not
    counted against the bound, or every run's first problem lost its buffers."""
    code = ("import json, sys\n"
            "from kb_eval.eval.judge import reference_worker as rw\n"
            "plan = rw.compare_sample({'plan': True, 'problem_code': sys.stdin.read(),"
            " 'device': 'cpu', 'precision': 'fp32'}, None)\n"
            "print(json.dumps(plan))\n")
    problem = PROBLEM.replace("torch.randn(6, 4)", "torch.randn(2048, 2048)")
    p = subprocess.run([sys.executable, "-c", code], input=problem, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    plan = json.loads(p.stdout.strip().splitlines()[-1])
    assert plan["out_bytes"] == 2048 * 2048 * 4 and "meta_error" not in plan, plan
