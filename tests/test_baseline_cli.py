"""python -m kb_eval.baseline end to end on CPU: three small problems, one of which kills
its process; the run records it and goes on; --resume times nothing twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBLEMS = {
    "1_scale.py": "return x * 2.0",
    "2_segfault.py": "import ctypes; ctypes.string_at(0); return x",
    "3_softmax.py": "return torch.softmax(x, dim=-1)",
}
TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


def run_baseline(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--quiet", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def test_baseline_records_crash_continues_and_resumes(tmp_path):
    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    for name, body in PROBLEMS.items():
        (level / name).write_text(TEMPLATE.format(body=body))
    args = ["--source", str(tmp_path / "probs"), "--results-dir", str(tmp_path / "res"),
            "--trials", "5"]  # and 1 warm-up call: the config's cpu_warmup
    r = run_baseline(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "res" / "baseline" / "cpu" / "local-probs" / "fp32.json"
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1 and data["precision"] == "fp32"
    assert data["hardware"]["slug"] == "cpu" and data["timing"]["trials"] == 5
    recs = data["records"]
    assert set(recs) == {"local-probs/level1/1", "local-probs/level1/2", "local-probs/level1/3"}
    assert recs["local-probs/level1/2"]["status"] == "crashed"
    assert "SIGSEGV" in recs["local-probs/level1/2"]["error"]
    for key in ("local-probs/level1/1", "local-probs/level1/3"):
        t = recs[key]["timing"]
        assert recs[key]["status"] == "ok" and t["n"] == 5 and 0 < t["min"] <= t["median"] <= t["max"]
        assert recs[key]["core"] is None and recs[key]["gpu"] is None  # pinned on a GPU only
        # the host's pace before and after the calls, on the record and on its visit
        host = recs[key]["host_work_ms"]
        assert len(host) == 2 and all(x > 0 for x in host)
        assert recs[key]["visits"][0]["host_work_ms"] == host
        # no launch times on a CPU, so never host-paced: one timing, the pace not judged
        assert recs[key]["visits"][0]["host_tries"] == 1
        assert recs[key]["visits"][0]["host_full_pace"] is None

    # --resume: nothing new to time, the file is unchanged.
    before = out.read_text()
    r = run_baseline(*args, "--resume", cwd=tmp_path)
    assert r.returncode == 0 and "3 problem(s) already in" in r.stdout
    assert json.loads(out.read_text())["records"] == json.loads(before)["records"]

    # --resume --retry-failed times only the failed one again.
    r = run_baseline(*args, "--resume", "--retry-failed", cwd=tmp_path)
    assert "2 problem(s) already in" in r.stdout and "1 to time" in r.stdout

    # Other settings on the same file: refused with one line, exit 2.
    r = run_baseline(*args[:-1], "7", cwd=tmp_path)
    assert r.returncode == 2 and "different timing settings" in r.stderr


def test_visits_split_the_trials_and_a_resumed_run_makes_the_missing_ones(tmp_path):
    level = tmp_path / "probs" / "level1"
    level.mkdir(parents=True)
    for name in ("1_scale.py", "3_softmax.py"):
        (level / name).write_text(TEMPLATE.format(body=PROBLEMS[name]))
    out = tmp_path / "b.json"
    args = ["--source", str(tmp_path / "probs"), "--output", str(out), "--trials", "5",
            "--visits", "2"]
    r = run_baseline(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["visits"] == 2
    for rec in data["records"].values():
        assert rec["status"] == "ok"
        assert [len(v["samples_ms"]) for v in rec["visits"]] == [3, 2]  # 5 calls split
        calls = [x for v in rec["visits"] for x in v["samples_ms"]]
        assert rec["timing"]["n"] == 5 and rec["timing"]["max"] == max(calls)
        assert rec["wall_s"] == sum(v["wall_s"] for v in rec["visits"])

    # Cut short after a first visit: --resume makes only the second, keeping the first.
    key = "local-probs/level1/3"
    first = data["records"][key]["visits"][0]
    data["records"][key].update(status="partial", visits=[first])
    out.write_text(json.dumps(data))
    r = run_baseline(*args, "--resume", cwd=tmp_path)
    assert r.returncode == 0 and "1 problem(s) already in" in r.stdout, r.stdout + r.stderr
    rec = json.loads(out.read_text())["records"][key]
    assert rec["status"] == "ok" and rec["visits"][0] == first
    assert [len(v["samples_ms"]) for v in rec["visits"]] == [3, 2]

    # Another number of visits on the same file is other settings; fewer trials than visits
    # is a user mistake.
    r = run_baseline(*args[:-1], "3", cwd=tmp_path)
    assert r.returncode == 2 and "different visits (2 there, --visits 3 now)" in r.stderr
    r = run_baseline(*args[:-3], "2", "--visits", "3", cwd=tmp_path)
    assert r.returncode == 2 and "--visits 3 is more than --trials 2" in r.stderr


def test_a_problems_visits_are_a_whole_sweep_apart():
    from types import SimpleNamespace

    from kb_eval.baseline.stage import BaselineJob, _visits_to_make, visit_trials
    from kb_eval.results import BaselineFile, BaselineRecord, BaselineVisit

    assert [visit_trials(100, 3, v) for v in range(3)] == [34, 33, 33]
    assert [visit_trials(5, 5, v) for v in range(5)] == [1] * 5
    problems = [SimpleNamespace(key=f"k{i}") for i in range(3)]
    job = BaselineJob(problems=problems, precision="fp32", mode="eager", timing=None,
                      results_dir=Path("."), device="cpu", gpus=[], timeout_s=1,
                      mem_limit_mb=1, visits=3)
    data = BaselineFile.model_construct(records={})
    order = [(p.key, v) for p, v in _visits_to_make(data, job)]
    assert order == [("k0", 0), ("k1", 0), ("k2", 0), ("k0", 1), ("k1", 1), ("k2", 1),
                     ("k0", 2), ("k1", 2), ("k2", 2)]

    def record(status, visits):
        return BaselineRecord(key="", source="", level=1, problem_id=1, name="",
                              status=status, visits=[BaselineVisit(samples_ms=[1.0])] * visits)

    data.records = {"k0": record("ok", 3), "k1": record("partial", 2), "k2": record("crashed", 1)}
    job.resume = True
    assert [(p.key, v) for p, v in _visits_to_make(data, job)] == [("k1", 2)]
    job.retry_failed = True
    assert [(p.key, v) for p, v in _visits_to_make(data, job)] == [
        ("k2", 0), ("k2", 1), ("k1", 2), ("k2", 2)]


def test_two_gpus_never_time_one_problem_twice_at_once(tmp_path, monkeypatch):
    """With several GPUs the visits run side by side, but never two of one problem (they
    are a sweep apart); a failed visit ends its problem's later ones. The child is stood
    in for here (no GPU in CI): the scheduling is what is tested."""
    import threading
    import time
    from types import SimpleNamespace

    from kb_eval.baseline import stage
    from kb_eval.timing import TimingSettings

    running, seen, lock = set(), [], threading.Lock()
    # per GPU: (the host's best pace a child was given, the fastest its GPU's earlier
    # children reported and came back ok)
    bests, reported_ok = {0: [], 1: []}, {0: [], 1: []}

    def fake_time_one(problem, visit, job, secret, gpu, host_best_ms, tmp):
        with lock:
            assert problem.key not in running, "two visits of one problem at once"
            running.add(problem.key)
            seen.append((problem.key, visit, gpu))
            bests[gpu].append((host_best_ms, min(reported_ok[gpu], default=None)))
            reported = 10.0 * (gpu + 1) - len(bests[gpu])  # each GPU's core its own pace
        time.sleep(0.05 if problem.key != "k0" else 0.2)  # k0 slow: k1, k2 catch up
        with lock:
            running.discard(problem.key)
        if problem.key == "k2" and visit == 1:  # what it reports is not taken
            return SimpleNamespace(ok=False, status="crashed", wall_s=0.05,
                                   result={"host_best_ms": 1.0},
                                   describe=lambda: "crashed", output_tail=""), gpu
        with lock:
            reported_ok[gpu].append(reported)
        return SimpleNamespace(ok=True, wall_s=0.05, result={"samples_ms": [1.0, 2.0],
                                                             "host_best_ms": reported}), gpu

    monkeypatch.setattr(stage, "_time_one", fake_time_one)
    problems = [SimpleNamespace(key=f"k{i}", source="s", level=1, problem_id=i, name=f"p{i}",
                                slug=f"p{i}") for i in range(3)]
    job = stage.BaselineJob(problems=problems, precision="fp32", mode="eager",
                            timing=TimingSettings(trials=6), results_dir=tmp_path,
                            device="cpu", gpus=[0, 1], timeout_s=10, mem_limit_mb=1000,
                            visits=3, output=tmp_path / "b.json")
    _, data = stage.run_baseline(job, progress=False)
    assert {gpu for _, _, gpu in seen} == {0, 1}
    for key in ("k0", "k1"):
        assert [v for k, v, _ in seen if k == key] == [0, 1, 2]
        assert data.records[key].status == "ok" and data.records[key].timing.n == 6
    assert [v for k, v, _ in seen if k == "k2"] == [0, 1]  # its third visit not made
    assert data.records["k2"].status == "crashed"
    # a child is judged against the fastest pace earlier children on its GPU's core saw
    for given in bests.values():
        assert given[0] == (None, None) and len(given) > 1
        assert all(got == expected for got, expected in given), bests
