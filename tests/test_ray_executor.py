"""The Ray executor (`--ray-address`) on a local Ray cluster this module starts (CPU, cpp
backend): the same verdicts as the local executor on a small KernelBench-layout folder the
test writes, a lane actor killed mid-sample (its sample evaluated again, every other
record intact, nothing twice), the driver killed mid-run and `--resume` finishing the run
(the records written before kept, each sample once, the local executor's verdicts), and a
wrong address or a missing Ray as one line, exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from candidates import eval_kit as kit

ray = pytest.importorskip("ray")

from kb_eval.eval import EvalConfig, evaluate  # noqa: E402
from kb_eval.eval.schedule.ray_lane import adopt_driver_env  # noqa: E402
from kb_eval.isolation.procs import MARKER, OWNER, owner_alive  # noqa: E402
from kb_eval.problems import load_problems, reference_copy  # noqa: E402
from kb_eval.timing import TimingSettings  # noqa: E402

pytestmark = pytest.mark.slow

KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "level1"
WRONG = """import torch
import torch.nn as nn


class ModelNew(nn.Module):  # relu(xW^T + b) + 1: wrong values
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x)) + 1
"""
CRASH = """import os
import torch.nn as nn


class ModelNew(nn.Module):  # dies in its first call
    def forward(self, x):
        os.abort()
"""
# The reference with a pause in its constructor, announced with its pid in a file: 60 s
# the first time (the test kills the lane then, and only the sweep of dead lanes' children
# can end it before the test ends), 1 s when evaluated again.
SLOW = """

import os as _os
import time as _time


class ModelNew(Model):
    def __init__(self, *args):
        super().__init__(*args)
        first = not _os.path.exists({mark!r})
        with open({mark!r}, "a") as f:
            f.write(f"started {{_os.getpid()}}\\n")
        _time.sleep(60 if first else 1)
"""


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that a process's start time is given in."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def orphans_of_runs_since(ticks: int) -> list[int]:
    """Sandbox children whose evaluator is gone and had started after `ticks`: this test's
    own leftovers, not those of other work on the machine (end_orphans_of_dead_runs
    sweeps them all)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        owner = next((v.split(b"=", 1)[1].decode() for v in environ
                      if v.startswith(f"{OWNER}=".encode())), "")
        started = owner.partition(":")[2]
        if f"{MARKER}=1".encode() in environ and started.isdigit() and \
                int(started) >= ticks and not owner_alive(owner):
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (starting one takes seconds)."""
    # address="local": a new cluster even where another one runs on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="kb_eval_tests")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Three tiny problems in KernelBench layout and six candidates, one per verdict kind
    (a C++ kernel, PyTorch, wrong values, a syntax error, a crash, the reference)."""
    if not KERNELBENCH.is_dir():
        pytest.skip(f"{KERNELBENCH} is not here")
    root = tmp_path_factory.mktemp("ray")
    problems, cands = root / "problems" / "level1", root / "candidates"
    problems.mkdir(parents=True)
    cands.mkdir()
    for name in ("1_ScaleAdd.py", "2_LinearRelu.py"):
        shutil.copy(kit.PROBLEMS / "level1" / name, problems / name)
    relu = (KERNELBENCH / "19_ReLU.py").read_text()
    relu = re.sub(r"^batch_size = .*$", "batch_size = 8", relu, flags=re.M)
    (problems / "19_ReLU.py").write_text(re.sub(r"^dim = .*$", "dim = 256", relu, flags=re.M))
    shutil.copy(kit.CPP / "level1_problem1_sample0.py", cands / "level1_problem1_sample0.py")
    for s in (0, 1):  # correct PyTorch; a syntax error
        shutil.copy(kit.CPP / f"level1_problem2_sample{s}.py", cands / f"level1_problem2_sample{s}.py")
    (cands / "level1_problem2_sample2.py").write_text(WRONG)
    relu_problem = load_problems(str(root / "problems"), 1, "19")[0]
    (cands / "level1_problem19_sample0.py").write_text(reference_copy(relu_problem))
    (cands / "level1_problem19_sample1.py").write_text(CRASH)
    return root


def eval_cmd(folder: Path, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kb_eval.eval", "--candidates", str(folder / "candidates"),
            "--source", str(folder / "problems"), "--backend", "cpp", "--live-baseline",
            "--trials", "3", "--jobs", "2", "--name", "m", "--run", "r", "--results-dir",
            str(results), *extra]


def eval_env(results: Path, cache: Path) -> dict:
    """The environment of eval_cmd's run: a config.py (beside its results) naming the
    build cache, 1 warm-up call, 2 correctness trials and a 60 s run timeout."""
    return {**os.environ, **kit.tuned_config(results / "config", cache_dir=cache, warmup=1,
                                             correct_trials=2, run_timeout_s=60)}


def eval_cli(folder: Path, results: Path, cache: Path, *extra: str):
    return subprocess.run(eval_cmd(folder, results, *extra), capture_output=True, text=True,
                          timeout=600, cwd=kit.REPO, env=eval_env(results, cache))


def verdicts(results: Path) -> dict:
    samples = json.loads((results / "m" / "r" / "results.json").read_text())["samples"]
    assert len({(s["key"], s["sample"]) for s in samples}) == len(samples), "a sample twice"
    return {(s["key"].rsplit("/", 1)[1], s["sample"]): s for s in samples}


_LOCAL: dict = {}


def local_verdicts(folder: Path, tmp_path: Path, cache: Path) -> dict:
    """The local executor's records of the folder: evaluated once per module, by whichever
    test asks first."""
    if folder not in _LOCAL:
        local = eval_cli(folder, tmp_path / "local", cache)
        assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-3000:]
        _LOCAL[folder] = verdicts(tmp_path / "local")
    return _LOCAL[folder]


@ray.remote(num_cpus=0)  # as a lane actor: Ray then sets OMP_NUM_THREADS=1 in its workers
class _EnvProbe:
    def child_sees(self, driver: dict | None) -> tuple[str | None, str]:
        """What this worker had, and what a child it starts sees, after adopting `driver`."""
        had = os.environ.get("OMP_NUM_THREADS")
        if driver is not None:
            adopt_driver_env(driver)
        out = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get("
                              "'OMP_NUM_THREADS'))"], capture_output=True, text=True)
        return had, out.stdout.strip()


def test_lane_children_get_the_drivers_thread_settings_not_rays(cluster):
    """A lane's children run with the OpenMP setting of the driver (here: none), not the
    one thread Ray gives a worker that asked for no CPU."""
    assert ray.get(_EnvProbe.remote().child_sees.remote(None)) == ("1", "1")
    probe = _EnvProbe.remote()
    assert ray.get(probe.child_sees.remote({"OMP_NUM_THREADS": None})) == ("1", "None")
    assert ray.get(probe.child_sees.remote({"OMP_NUM_THREADS": "3"}))[1] == "3"


@ray.remote(num_cpus=0)
def _node_sandbox_error(config: str, faults: str | None) -> str | None:
    """What a lane on this worker's node finds of the sandbox; `faults` arms the
    sandbox_start fault here only, as on a node without namespaces."""
    if faults:
        os.environ["KB_EVAL_FAULTS"] = faults
    from kb_eval.eval.schedule.ray_lane import node_sandbox_error

    return node_sandbox_error(EvalConfig.model_validate_json(config))


def test_a_node_that_cannot_sandbox_refuses_its_lane(cluster, tmp_path):
    """Each lane probes the sandbox on its own node (the driver's probe says nothing of
    another host): a node where it cannot start refuses in one line, naming the node;
    --no-sandbox asks nothing of it."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "sandbox_start").write_text("always")
    on = EvalConfig(cache_dir=tmp_path / "c").model_dump_json()
    off = EvalConfig(cache_dir=tmp_path / "c", sandbox=False).model_dump_json()
    assert ray.get(_node_sandbox_error.remote(on, None)) is None
    why = ray.get(_node_sandbox_error.remote(on, str(faults)))
    assert why is not None and "\n" not in why, why
    assert re.fullmatch(r"node \S+ cannot start the sandbox \(injected fault at "
                        r"sandbox_start\); --no-sandbox runs candidates without it", why), why
    assert ray.get(_node_sandbox_error.remote(off, str(faults))) is None


def test_same_verdicts_as_local(cluster, folder, tmp_path, build_cache_dir):
    a = local_verdicts(folder, tmp_path, build_cache_dir)
    on_ray = eval_cli(folder, tmp_path / "ray", build_cache_dir, "--ray-address", cluster)
    assert on_ray.returncode == 0, on_ray.stdout[-2000:] + on_ray.stderr[-3000:]
    b = verdicts(tmp_path / "ray")
    assert {k: r["status"] for k, r in a.items()} == {k: r["status"] for k, r in b.items()}
    assert {k: r["status"] for k, r in b.items()} == {
        ("1", 0): "correct", ("2", 0): "correct", ("2", 1): "compile_error",
        ("2", 2): "incorrect", ("19", 0): "correct", ("19", 1): "crashed"}
    for key in (("1", 0), ("2", 0), ("19", 0)):  # the same checks ran on either side
        assert a[key]["correctness"]["passed"] == b[key]["correctness"]["passed"] > 0
    assert b[("1", 0)]["build"]["status"] == "ok" and b[("1", 0)]["lane"].endswith("/cpu")
    assert a[("1", 0)].get("lane") is None  # declared on every record, set on Ray only
    run = json.loads((tmp_path / "ray" / "m" / "r" / "results.json").read_text())
    assert run["config"]["executor"] == "ray" and run["config"]["ray_address"] == cluster



def _lanes() -> set[str]:
    """Our lane actors alive on the cluster."""
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("kb-eval-lane-")}


@contextlib.contextmanager
def _driver_past_a_lane_record(folder: Path, tmp_path: Path, cache: Path, cluster: str):
    """A Ray driver of the folder (its own process group, children included, its output
    in driver.log), handed over still running once results.json holds a lane's record;
    killed with its group on the way out if the caller left it running."""
    path = tmp_path / "ray" / "m" / "r" / "results.json"
    log = (tmp_path / "driver.log").open("w")
    cmd = eval_cmd(folder, tmp_path / "ray", "--ray-address", cluster)
    driver = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=kit.REPO,
                              env=eval_env(tmp_path / "ray", cache), start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            try:
                samples = json.loads(path.read_text())["samples"]  # written atomically
            except (OSError, ValueError):
                samples = []
            if any(s.get("lane") for s in samples):
                break
            time.sleep(0.05)
        assert driver.poll() is None, "the driver ended before the signal: " + \
            (tmp_path / "driver.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no lane record in 240 s"
        yield driver
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
        log.close()


def test_driver_killed_then_resume(cluster, folder, tmp_path, build_cache_dir):
    """SIGKILL the driver (its process group) once results.json holds a lane's record but
    not all; its lane actors end with it (Ray: owned by its job), and `--resume` with the
    same command judges the rest: each sample once, the records written before kept as
    they were, the local executor's verdicts."""
    expected = local_verdicts(folder, tmp_path, build_cache_dir)
    before, since = _lanes(), boot_ticks()
    args = ("--ray-address", cluster)
    path = tmp_path / "ray" / "m" / "r" / "results.json"
    with _driver_past_a_lane_record(folder, tmp_path, build_cache_dir, cluster) as driver:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    assert driver.returncode == -signal.SIGKILL
    kept = verdicts(tmp_path / "ray")  # the file as the driver left it
    assert 0 < len(kept) < len(expected), sorted(kept)
    assert any(r.get("lane") for r in kept.values())
    # The dead driver's lanes go with it (Ray ends the actors its job owns).
    deadline = time.monotonic() + 60
    while _lanes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _lanes() - before, _lanes()

    resumed = eval_cli(folder, tmp_path / "ray", build_cache_dir, *args, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert f"({len(kept)} already recorded)" in resumed.stdout
    after = verdicts(tmp_path / "ray")  # each sample once (verdicts asserts it)
    assert set(after) == set(expected)
    for key, record in kept.items():  # as written before the kill, not judged again
        assert after[key] == record, key
    assert {k: r["status"] for k, r in after.items()} == {
        k: r["status"] for k, r in expected.items()}
    for key, r in expected.items():
        if r.get("correctness"):
            assert after[key]["correctness"]["passed"] == r["correctness"]["passed"], key
    assert all(r["lane"].endswith("/cpu") for r in after.values() if r["status"] != "compile_error")
    run = json.loads(path.read_text())
    assert run["config"]["executor"] == "ray" and run["config"]["ray_address"] == cluster
    # Nothing of either driver is left: no lane actor, no child of a dead lane.
    assert not _lanes() - before
    assert orphans_of_runs_since(since) == []

def test_driver_terminated_stops_like_ctrl_c(cluster, folder, tmp_path, build_cache_dir):
    """`kill` (SIGTERM) on the driver once a lane's record is written: the run stops as
    Ctrl-C stops it, as locally (ray.init puts in a handler of its own that exits with
    15): one line, exit 130, the records written kept, its lanes gone."""
    before = _lanes()
    with _driver_past_a_lane_record(folder, tmp_path, build_cache_dir, cluster) as driver:
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=120)
    out = (tmp_path / "driver.log").read_text()
    assert driver.returncode == 130, out[-3000:]
    assert "interrupted: what was finished is saved" in out
    assert any(r.get("lane") for r in verdicts(tmp_path / "ray").values())
    deadline = time.monotonic() + 60
    while _lanes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _lanes() - before, _lanes()


def _kill_lane_when(mark: Path, killed: list) -> None:
    """Once the slow candidate announces itself, ray.kill the lane actor running it."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not mark.exists():
        time.sleep(0.1)
    lanes = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("kb-eval-lane-")]
    for lane in lanes:
        ray.kill(ray.get_actor(lane["name"], namespace=lane["namespace"]))
        killed.append(lane["name"])


def test_lane_killed_mid_sample_is_rerun(cluster, folder, tmp_path, build_cache_dir):
    mark, since = tmp_path / "slow-started", boot_ticks()
    problems = {p.problem_id: p for p in load_problems(str(folder / "problems"), 1)}
    slow = reference_copy(problems[2]).replace("ModelNew = Model", "") + SLOW.format(mark=str(mark))
    pairs = [(problems[2], 7, slow), (problems[2], 0, (kit.CPP / "level1_problem2_sample0.py")
                                      .read_text()), (problems[19], 0, reference_copy(problems[19]))]
    # sandbox=False: the slow candidate announces itself (and its pid) in a file of the
    # test's, which a sandboxed child may not write.
    config = EvalConfig(backend="cpp", live_baseline=True, timing=TimingSettings(warmup=1, trials=3),
                        correct_trials=2, jobs=2, cache_dir=build_cache_dir,
                        results_dir=tmp_path / "r", run_timeout_s=60, executor="ray",
                        sandbox=False)
    killed: list = []
    # a torch build lock made during the run (as a killed build or load leaves one): the
    # run's end clears it (build.clear_batons), or later loads of that build wait on it
    left = build_cache_dir / "builds" / "ray-test-lock" / "ext" / "lock"
    left.parent.mkdir(parents=True, exist_ok=True)
    left.write_text("")
    os.utime(left, (time.time() + 3600,) * 2)
    killer = threading.Thread(target=_kill_lane_when, args=(mark, killed), daemon=True)
    killer.start()
    records = list(evaluate(pairs, config))
    killer.join(timeout=5)
    assert not left.exists()
    assert len(killed) == 1, killed
    by = {(r.problem_id, r.sample): r for r in records}
    assert len(records) == len(by) == 3  # each sample once
    assert {k: r.status for k, r in by.items()} == {(2, 7): "correct", (2, 0): "correct",
                                                  (19, 0): "correct"}
    assert len(by[(2, 7)].requeued) == 1 and "died mid-sample" in by[(2, 7)].requeued[0]
    pids = [int(line.split()[1]) for line in mark.read_text().splitlines()]
    assert len(pids) == 2  # evaluated again, on the new lane
    assert not by[(2, 0)].requeued and not by[(19, 0)].requeued
    # The dead lane's children (the candidate asleep for 60 s, the reference server) were
    # killed by the lane that replaced it: none is left for this sweep.
    assert not alive(pids[0])
    assert orphans_of_runs_since(since) == []


def _one_line_exit_2(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_bad_address_or_no_ray_is_one_line(folder, tmp_path):
    bad = eval_cli(folder, tmp_path / "r", tmp_path / "cache", "--ray-address", "127.0.0.1:9")
    assert "--ray-address 127.0.0.1:9: no Ray head answers there" in _one_line_exit_2(bad)
    fake = tmp_path / "fake" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no ray here')\n")
    env = {**eval_env(tmp_path / "r", tmp_path / "cache"),
           "PYTHONPATH": f"{fake.parent}{os.pathsep}{kit.REPO}"}
    missing = subprocess.run(
        [sys.executable, "-m", "kb_eval.eval", "--candidates", str(folder / "candidates"),
         "--source", str(folder / "problems"), "--backend", "cpp", "--ray-address", "local",
         "--results-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=300, cwd=kit.REPO, env=env)
    assert "the Ray executor (--ray-address) needs Ray: pip install" in \
        _one_line_exit_2(missing)
