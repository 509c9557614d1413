"""The fault suite: candidates that crash, hang, exhaust memory, flood their output, leave
processes behind or vandalise the evaluator's files. One CLI run evaluates them in a fixed
order (--jobs 1) between honest candidates; each test checks that the run finished, that
the fault is named in its own record, that every other record is intact, and that no
process of the run is left (every sandbox child carries KB_EVAL_SANDBOX=1 and, here, the
test's token in its environment or command line)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import torch

from adversarial.evalrun import REPO, eval_command, read_records, run_eval

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "candidates"
SCALE_ADD, TRANSPOSE = "level1/1", "level1/4"

# (name, file, problem): evaluated in this order, one at a time.
CPU_ORDER = [
    ("honest_first", "honest_torch.py", SCALE_ADD),
    ("segfault", "segfault.py", SCALE_ADD),
    ("abort", "abort.py", SCALE_ADD),
    ("host_loop", "host_loop.py", SCALE_ADD),
    ("host_oom", "host_oom.py", SCALE_ADD),
    ("exit_zero", "exit_zero.py", SCALE_ADD),
    ("stdout_flood", "stdout_flood.py", SCALE_ADD),
    ("fork_orphans", "fork_orphans.py", SCALE_ADD),
    ("tamper_files", "tamper_files.py", SCALE_ADD),
    ("wrong_after_tamper", "wrong_zeros.py", SCALE_ADD),
    ("honest_last", "honest_torch.py", SCALE_ADD),
]
GPU_ORDER = [
    ("honest_first", "honest_torch.py", SCALE_ADD),
    ("illegal_memory_access", "gpu_kernel_faults.py", SCALE_ADD),
    ("cuda_infinite_loop", "gpu_kernel_faults.py", TRANSPOSE),
    ("gpu_oom", "gpu_oom.py", SCALE_ADD),
    ("honest_last", "honest_torch.py", SCALE_ADD),
]
ARGS = ("--jobs", "1", "--trials", "3")
SETTINGS = dict(warmup=1, correct_trials=2, run_timeout_s=25)
# Host memory per child: low enough on CPU for host_oom to hit it quickly; a CUDA child's
# own footprint (context, libraries) needs more.
MEM_LIMIT_MB = {"cpp": 3000, "cuda": 16000}


# ------------------------------------------------------------------ helpers
def token_processes(token: str) -> list[int]:
    """Live processes carrying the token in their environment or command line."""
    found, me = [], os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (token.encode() in environ or token.encode() in cmdline):
            found.append(int(entry))
    return found


def sandbox_processes(token: str) -> list[int]:
    """The subset that still carries the sandbox marker."""
    out = []
    for pid in token_processes(token):
        try:
            if b"KB_EVAL_SANDBOX=1" in Path(f"/proc/{pid}/environ").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def kill_leftovers(pids: list[int]) -> None:
    """Leftovers of this test only (found by its token): don't let a failure linger."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def settled_leftovers(token: str, wait_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while (pids := token_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def evaluate(order, backend, tmp_path_factory, tag, *extra: str) -> dict:
    root = tmp_path_factory.mktemp(f"faults_{tag}")
    (root / ".kb_fault_tamper_ok").write_text("the tamper_files candidate may vandalise here\n")
    token = f"kbfault-{uuid.uuid4().hex}"
    entries = [(name, key, CANDIDATES / file) for name, file, key in order]
    proc, records, path = run_eval(entries, backend=backend, results_dir=root / "results",
                                   cache_dir=root / "cache",
                                   args=ARGS + extra,
                                   env={"KB_EVAL_FAULT_TOKEN": token},
                                   settings={**SETTINGS, "mem_limit_mb": MEM_LIMIT_MB[backend]})
    leftovers = settled_leftovers(token)
    marked = [p for p in leftovers if p in sandbox_processes(token)]
    kill_leftovers(leftovers)
    return {"proc": proc, "records": records, "path": path, "leftovers": leftovers,
            "marked_leftovers": marked, "token": token}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return evaluate(CPU_ORDER, "cpp", tmp_path_factory, "cpu")


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    return evaluate(GPU_ORDER, "cuda", tmp_path_factory, "gpu")


def _record(run, name):
    assert run["proc"].returncode == 0, run["proc"].stdout[-3000:] + run["proc"].stderr[-3000:]
    assert name in run["records"], f"{name} has no record; have {sorted(run['records'])}"
    return run["records"][name]


# ------------------------------------------------------------------ CPU faults
def test_run_finishes_with_every_record(cpu_run):
    assert cpu_run["proc"].returncode == 0, cpu_run["proc"].stderr[-3000:]
    data = json.loads(cpu_run["path"].read_text())
    assert "hacked" not in data and data.get("kind") == "run"
    assert sorted(r["sample"] for r in data["samples"]) == list(range(len(CPU_ORDER)))
    assert data["summary"]["samples"] == len(CPU_ORDER)


@pytest.mark.parametrize("name,status,kind", [
    ("segfault", "crashed", "segfault"),
    ("abort", "crashed", "abort"),
    ("host_loop", "timeout", "timeout"),
    ("host_oom", "oom", "oom"),
    ("exit_zero", "crashed", "exit"),
    ("stdout_flood", "output_flood", "output_flood"),
])
def test_fault_named_in_its_record(cpu_run, name, status, kind):
    r = _record(cpu_run, name)
    assert r["status"] == status, r
    assert r["crash"] and r["crash"]["kind"] == kind, r["crash"]
    assert not r["correct"] and r["speedup"] is None


def test_flood_output_tail_is_bounded(cpu_run):
    r = _record(cpu_run, "stdout_flood")
    assert len(r["crash"]["output_tail"]) <= 16_000 and len(r.get("detail") or "") <= 16_000


@pytest.mark.parametrize("name", ["honest_first", "honest_last"])
def test_honest_records_intact(cpu_run, name):
    r = _record(cpu_run, name)
    assert r["status"] == "correct" and r["correct"], r
    assert r["correctness"]["passed"] == r["correctness"]["trials"] > 0


def test_orphans_reaped_and_candidate_judged(cpu_run):
    r = _record(cpu_run, "fork_orphans")
    assert r["status"] == "correct", r  # leaving processes behind is not a wrong answer...
    assert cpu_run["marked_leftovers"] == [], "sandbox processes outlived the run"


def test_no_process_left_at_all(cpu_run):
    assert cpu_run["leftovers"] == [], "processes of the run are still alive"


def test_vandal_changes_no_verdict(cpu_run):
    """Reference outputs never touch the disk: the vandal finds none to zero, and the
    all-zeros candidate after it is judged on the true reference."""
    r = _record(cpu_run, "tamper_files")
    assert r["status"] == "correct", r
    wrong = _record(cpu_run, "wrong_after_tamper")
    assert wrong["status"] == "incorrect" and not wrong["correct"], wrong


def test_escape_from_the_sandbox_marker(tmp_path_factory):
    """A descendant that drops the KB_EVAL_SANDBOX marker from its environment (exec with
    env={}) and leaves its session is invisible to a marker-based reaper. In the sandbox
    it ends with the child's PID namespace; without it (--no-sandbox), the eval's sweep
    (kb_eval/eval/schedule/reaper.py) ends it and names it on the record."""
    for extra in ((), ("--no-sandbox",)):
        run = evaluate([("escape_env", "escape_env.py", SCALE_ADD)], "cpp", tmp_path_factory,
                       "escape", *extra)
        r = _record(run, "escape_env")
        assert r["status"] == "correct", r
        assert run["leftovers"] == [], "the marker-less escapee outlived the run"
        if extra:  # only the evaluator's own sweep found it
            assert "left_processes" in {f["code"] for f in r["flags"]}


# ------------------------------------------------------------------ GPU faults
@pytest.mark.gpu
@pytest.mark.parametrize("name,status,kind", [
    ("illegal_memory_access", "crashed", "cuda_error"),
    ("cuda_infinite_loop", "timeout", "timeout"),
])
def test_gpu_fault_named_in_its_record(gpu_run, name, status, kind):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    r = _record(gpu_run, name)
    assert r["status"] == status and r["crash"]["kind"] == kind, r


@pytest.mark.gpu
def test_gpu_oom_named_in_its_record(gpu_run):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    r = _record(gpu_run, "gpu_oom")
    assert not r["correct"] and "out of memory" in (r["error"] or "").lower(), r


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["honest_first", "honest_last"])
def test_gpu_honest_records_intact(gpu_run, name):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    r = _record(gpu_run, name)
    assert r["status"] == "correct", r
    assert gpu_run["leftovers"] == []


# Ctrl-C or kill to exit (issue 59: within 5 s); the bound leaves room for a busy machine
# while catching a stop that waits for a build or a zygote's start (35-127 s before).
STOP_S = 15.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_kill_stops_the_run_cleanly(tmp_path, sig):
    """`kill` (SIGTERM: a timeout, a batch scheduler) stops a run as Ctrl-C (SIGINT) does,
    promptly: the running candidate's child is killed although it ignores SIGTERM itself,
    no process of the run is left, the finished record is kept, exit 130 with one line.
    Promptly: well under STOP_S, on a busy 2-core machine (3 s measured there)."""
    token = f"kbfault-{uuid.uuid4().hex}"
    entries = [("honest", SCALE_ADD, CANDIDATES / "honest_torch.py"),
               ("host_loop", SCALE_ADD, CANDIDATES / "host_loop.py")]
    cmd, env, names, path = eval_command(
        entries, backend="cpp", results_dir=tmp_path / "results", cache_dir=tmp_path / "cache",
        args=("--jobs", "1", "--trials", "3"), env={"KB_EVAL_FAULT_TOKEN": token},
        settings={**SETTINGS, "run_timeout_s": 600})
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not ("honest" in read_records(path, names) and sandbox_processes(token)):
            assert proc.poll() is None and time.monotonic() < deadline, "never got there"
            time.sleep(0.2)
        time.sleep(2)  # host_loop's child is in its endless call by now
        proc.send_signal(sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=120)
        stop_s = time.monotonic() - sent
    finally:
        proc.kill()
    leftovers = settled_leftovers(token)
    kill_leftovers(leftovers)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: what was finished is saved" in err
    assert read_records(path, names)["honest"]["status"] == "correct"
    assert leftovers == [], "processes of the run outlived it"
    assert stop_s < STOP_S, f"the run took {stop_s:.1f} s to stop"
