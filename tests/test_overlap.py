"""Several candidate children per device (schedule/overlap.py) with the device's timing lock
(kb_eval/devlock.py), on the CPU with the cpp backend: children are in flight side by side,
yet no timed call ever overlaps another process's call (a neighbour candidate's or the
reference server's); verdicts are those of one child at a time; a candidate that
compiles for ever in its first call is a `timeout` on its load budget and the run goes on;
two CPU lanes (the config's cpu_lanes, stand-ins for GPUs) judge alike.

The problem and the candidates append `pid what start end` for every forward call to one
log file: `what` is the candidate child's `progress` (its working folder) -- `timing`
during its timing step -- or `ref` in the reference server."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict

import pytest

from candidates import eval_kit as kit
from kb_eval.devlock import DeviceLock

pytestmark = pytest.mark.slow

LOGGER = '''
import os, time
LOG = {log!r}

def _logged(what, fn):
    t0 = time.time()
    out = fn()
    with open(LOG, "a") as f:
        f.write(f"{{os.getpid()}} {{what}} {{t0:.6f}} {{time.time():.6f}}\\n")
    return out

def _spin(s):  # CPU work, as a kernel would be
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass
'''

PROBLEM = LOGGER + '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return _logged("ref", lambda: (_spin(0.004), 2 * x + y)[1])


def get_inputs():
    return [torch.randn(64, 128), torch.randn(64, 128)]


def get_init_inputs():
    return []
'''

CANDIDATE = LOGGER + '''
import torch
import torch.nn as nn

FIRST_CALL_S = {first_s}
BIAS = {bias}
_calls = [0]


def _where():
    try:
        return open("progress").read().split()[0]
    except (OSError, IndexError):
        return "?"


class ModelNew(nn.Module):
    def forward(self, x, y):
        def work():
            _calls[0] += 1
            if _calls[0] == 1:
                time.sleep(FIRST_CALL_S)  # a lazy compile in the first call
            _spin(0.01)
            return 2 * x + y + BIAS
        return _logged(_where(), work)
'''

# sample -> (seconds of "compiling" in the first call, bias: 0 correct, else wrong)
SAMPLES = {0: (1.5, 0.0), 1: (1.5, 0.0), 2: (1.5, 0.5), 3: (1.5, 0.0), 4: (0.2, 0.0),
           5: (1.5, 0.0)}
LAZY = 6  # compiles for 600 s: over a 4 s load budget


def _write_inputs(root, log, samples):
    problems = root / "problems" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_ScaleAdd.py").write_text(PROBLEM.format(log=str(log)))
    cands = root / "cands"
    cands.mkdir()
    for s, (first_s, bias) in samples.items():
        (cands / f"level1_problem1_sample{s}.py").write_text(
            CANDIDATE.format(log=str(log), first_s=first_s, bias=bias))
    return problems.parent, cands


def _evaluate(root, depth: int, samples: dict, cache, **tuning) -> tuple[dict, list]:
    log = root / f"calls_{depth}.log"
    problems, cands = _write_inputs(root / f"d{depth}", log, samples)
    results = root / f"results_{depth}"
    # recheck_timed 0: these candidates are timed for the lock, not re-checked.
    # --no-sandbox: the candidates log their calls, with their pids, to one shared file
    # (a sandboxed child can write only its own scratch, and is pid 2 in its namespace).
    proc = kit.cli("--no-sandbox", "--candidates", str(cands), "--source", str(problems),
                   "--backend", "cpp", "--live-baseline", "--trials", "4", "--jobs", "2",
                   "--name", "m", "--run", "r", "--results-dir", str(results),
                   env=kit.tuned_config(root / f"config_{depth}", recheck_timed=0,
                                        lane_depth=depth, cache_dir=cache, warmup=1,
                                        correct_trials=3, run_timeout_s=60, **tuning))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((results / "m" / "r" / "results.json").read_text())
    calls = [(int(p), w, float(a), float(b)) for p, w, a, b in
             (ln.split() for ln in log.read_text().splitlines())]
    return {s["sample"]: s for s in data["samples"]}, calls


@pytest.fixture(scope="module")
def runs(tmp_path_factory, build_cache_dir):
    root = tmp_path_factory.mktemp("overlap")
    deep = _evaluate(root, 3, {**SAMPLES, LAZY: (600, 0.0)}, build_cache_dir,
                     load_budget_s=4)
    serial = _evaluate(root, 1, SAMPLES, build_cache_dir)
    lanes = _evaluate(root, 2, SAMPLES, build_cache_dir, cpu_lanes=2)
    return {"deep": deep, "serial": serial, "lanes": lanes}


def _overlap(a, b) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_several_children_in_flight(runs):
    _, calls = runs["deep"]
    cands = [c for c in calls if c[1] != "ref"]
    pairs = {(a[0], b[0]) for a in cands for b in cands if a[0] != b[0] and _overlap(a, b)}
    assert pairs, "no two candidate children ever ran a call at the same time"


def test_timed_calls_never_overlap_other_work(runs):
    _, calls = runs["deep"]
    timed = [c for c in calls if c[1] == "timing"]
    assert len(timed) >= 6 * 5, calls  # warmup + discarded first + 4 per correct sample
    for t in timed:
        clash = [c for c in calls if c[0] != t[0] and _overlap(t, c)]
        assert not clash, f"timed call {t} overlapped {clash}"
    # Each child's whole timing step, from its first timed call to its last, is alone
    # with respect to the other candidates.
    steps = defaultdict(list)
    for t in timed:
        steps[t[0]].append(t)
    for pid, ts in steps.items():
        window = (pid, "step", min(t[2] for t in ts), max(t[3] for t in ts))
        clash = [c for c in calls if c[0] != pid and c[1] != "ref" and _overlap(window, c)]
        assert not clash, f"{pid}'s timing step overlapped {clash}"


def test_same_verdicts_as_one_at_a_time(runs):
    deep, serial = runs["deep"][0], runs["serial"][0]
    assert {s: deep[s]["status"] for s in SAMPLES} == {s: serial[s]["status"] for s in SAMPLES}
    assert deep[2]["status"] == "incorrect" and deep[0]["status"] == "correct"
    assert all(deep[s]["timing"]["n"] == 4 for s in SAMPLES if s != 2)


def test_two_cpu_lanes_judge_alike(runs):
    """cpu_lanes=2 (stand-ins for two GPUs), two children in flight on each: the same
    verdicts, each lane with its own reference server."""
    lanes, calls = runs["lanes"]
    serial = runs["serial"][0]
    assert {s: lanes[s]["status"] for s in SAMPLES} == {s: serial[s]["status"] for s in SAMPLES}
    assert len({c[0] for c in calls if c[1] == "ref"}) == 2


def test_lazy_compile_times_out_on_its_load_budget(runs):
    r = runs["deep"][0][LAZY]
    assert r["status"] == "timeout" and r["crash"]["kind"] == "timeout", r
    assert "load budget" in r["error"], r["error"]
    assert r["phases"]["run"] < 20, r["phases"]  # 4 s of budget, not the 600 s it asked


def test_lock_excludes_and_writers_are_not_starved(tmp_path):
    """The lock itself, across threads of one process (each opens its own file): a writer
    waits for the readers in, and new readers wait behind a waiting writer."""
    path, events = tmp_path / "dev.lock", []
    reader = DeviceLock(path)
    reader.acquire("shared")

    def writer():
        with DeviceLock(path).held("exclusive"):
            events.append("writer")

    def late_reader():
        time.sleep(0.2)  # after the writer started waiting
        with DeviceLock(path).held("shared"):
            events.append("late reader")

    threads = [threading.Thread(target=writer), threading.Thread(target=late_reader)]
    for t in threads:
        t.start()
    time.sleep(0.6)
    assert events == []  # the writer waits for the first reader; the late one for it
    reader.release()
    for t in threads:
        t.join(5)
    assert events == ["writer", "late reader"]


# A candidate whose __init__ compiles (load_inline), the compile made a minute longer by
# the `compile_stall` fault point (kb_eval/faults.py) in its run child; it logs the
# compile's start (before load_inline) and span. The others wait in their first call
# until it has begun, so their timing steps come while it compiles.
COMPILING = LOGGER + '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "#include <torch/extension.h>\\n" \\
         "torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {{ return 2 * x + y; }}\\n"


def _where():
    try:
        return open("progress").read().split()[0]
    except (OSError, IndexError):
        return "?"  # not a run child: the build's first call


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        t0, where = time.time(), _where()
        if where == "load":
            _logged("compile-start", lambda: None)
        self.ext = load_inline("kb_overlap_stall", cpp_sources=SOURCE, functions=["scale_add"])
        if where == "load":
            with open(LOG, "a") as f:
                f.write(f"{{os.getpid()}} compile {{t0:.6f}} {{time.time():.6f}}\\n")

    def forward(self, x, y):
        return _logged(_where(), lambda: (_spin(0.01), self.ext.scale_add(x, y))[1])
'''

AFTER_COMPILE_STARTS = CANDIDATE.replace('''            if _calls[0] == 1:
                time.sleep(FIRST_CALL_S)  # a lazy compile in the first call
''', '''            while _calls[0] == 1 and "compile-start" not in open(LOG).read():
                time.sleep(0.05)  # the compiling sample has begun its compile
''')


def test_a_compile_in_init_delays_no_other_timing_step(tmp_path, build_cache_dir,
                                                      monkeypatch):
    """The candidate's own compile lets go of the device's lock (child/compiles.py): the
    other samples' timing steps run and end while it still compiles, and every verdict
    is what it would be."""
    from kb_eval.faults import VAR

    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "compile_stall").write_text("once")
    monkeypatch.setenv(VAR, str(faults))
    log = tmp_path / "calls.log"
    log.touch()
    problems, cands = _write_inputs(tmp_path, log, {})
    (cands / "level1_problem1_sample0.py").write_text(
        COMPILING.format(log=str(log)))
    for s, bias in ((1, 0.0), (2, 0.0)):  # correct: a wrong one is not timed (gate.py)
        (cands / f"level1_problem1_sample{s}.py").write_text(
            AFTER_COMPILE_STARTS.format(log=str(log), first_s=0, bias=bias))
    results = tmp_path / "results"
    # --no-sandbox: the candidates log their calls, with their pids, to one shared file,
    # and wait on each other through it (a sandboxed child writes only its own scratch).
    # The load budget covers the others' wait in their first call (the compiling
    # sample's build, then its start) and its own stalled compile.
    proc = kit.cli("--no-sandbox", "--candidates", str(cands), "--source", str(problems),
                   "--backend", "cpp", "--live-baseline", "--trials", "4", "--jobs", "2",
                   "--name", "m", "--run", "r", "--results-dir", str(results),
                   env=kit.tuned_config(tmp_path / "config", recheck_timed=0,
                                        load_budget_s=400, lane_depth=3,
                                        cache_dir=build_cache_dir, warmup=1,
                                        correct_trials=3, run_timeout_s=600))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (faults / "compile_stall").exists(), "the compile was not stalled"
    samples = {s["sample"]: s for s in json.loads(
        (results / "m" / "r" / "results.json").read_text())["samples"]}
    assert {s: samples[s]["status"] for s in samples} == {
        0: "correct", 1: "correct", 2: "correct"}, samples
    calls = [(int(p), w, float(a), float(b)) for p, w, a, b in
             (ln.split() for ln in log.read_text().splitlines())]
    [(pid, _, began, compiled)] = [c for c in calls if c[1] == "compile"]
    timed = [c for c in calls if c[1] == "timing" and c[0] != pid]
    assert {c[0] for c in timed} and len({c[0] for c in timed}) == 2, calls
    assert all(began < c[2] and c[3] < compiled for c in timed), (began, compiled, timed)
    assert any(c[0] == pid and c[1] == "timing" for c in calls)  # and it was timed too
