"""isolation.Server: a long-lived child for trusted work, watched per call, replaced
when it fails (real processes, no GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kb_eval.isolation import Server

TASKS = str(Path(__file__).parent / "tasks")


def _server(tmp_path, name: str) -> Server:
    return Server(f"isolation_tasks:{name}", {"PYTHONPATH": TASKS}, tmp_path / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.fixture()
def server(tmp_path):
    s = _server(tmp_path, "remember")
    yield s
    s.close()


def test_state_kept_between_calls_of_one_process(server):
    a = server.call({"x": 1}, timeout_s=60)
    b = server.call({"x": 2}, timeout_s=60)
    assert a.ok and b.ok
    assert b.result["seen"] == [1, 2] and b.result["pid"] == a.result["pid"]
    server.close()
    assert not _alive(a.result["pid"])


@pytest.mark.parametrize("task, status", [("die", "crashed"), ("fail", "error"),
                                          ("hang", "timeout")])
def test_a_failed_call_is_named_and_the_next_call_gets_a_fresh_process(server, tmp_path,
                                                                        task, status):
    first = server.call({"x": 1}, timeout_s=60)
    server.target = f"isolation_tasks:{task}"
    bad = server.call({}, timeout_s=3)
    assert bad.status == status
    if task == "fail":
        assert "ValueError: no good" in bad.error
    assert not _alive(first.result["pid"])
    server.target = "isolation_tasks:remember"
    again = server.call({"x": 2}, timeout_s=60)
    assert again.ok and again.result["seen"] == [2] and again.result["pid"] != first.result["pid"]


def _short_of_memory(out) -> bool:
    return "OutOfMemoryError" in out.error


@pytest.mark.parametrize("survives", [None, _short_of_memory], ids=["plain", "told"])
def test_a_server_survives_only_the_failures_it_is_told_leave_it_sound(tmp_path, survives):
    """The reference server keeps running after a task ran out of device memory: ended,
    it took with it the device buffers it held for the other samples in flight. Any
    other exception still ends it."""
    s = Server("isolation_tasks:remember", {"PYTHONPATH": TASKS}, tmp_path / "s",
               survives=survives)
    try:
        first = s.call({"x": 1}, timeout_s=60)
        s.target = "isolation_tasks:short_of_memory"
        short = s.call({}, timeout_s=60)
        s.target = "isolation_tasks:remember"
        after = s.call({"x": 2}, timeout_s=60)
        s.target = "isolation_tasks:fail"
        assert s.call({}, timeout_s=60).status == "error"
        s.target = "isolation_tasks:remember"
        last = s.call({"x": 3}, timeout_s=60)
    finally:
        s.close()
    assert short.status == "error" and "no room for 8 GiB" in short.error
    kept = survives is not None
    assert (after.result["pid"] == first.result["pid"]) is kept
    assert after.result["seen"] == ([1, 2] if kept else [2])
    assert last.result["seen"] == [3] and last.result["pid"] != after.result["pid"]


def test_output_limit_counts_per_call(tmp_path):
    s = _server(tmp_path, "talk")
    try:
        for _ in range(3):  # 3 x 0.6 MiB in one log, under a 1 MiB limit per call
            assert s.call({"n": 600_000}, timeout_s=60, output_limit_mb=1).ok
        assert s.call({"n": 2_000_000}, timeout_s=60, output_limit_mb=1).status == "output_flood"
    finally:
        s.close()


def test_a_servers_module_warms_up_once_before_its_first_task(tmp_path):
    """The reference server imports torch._dynamo this way (its meta forwards need it):
    6.8 s of a fresh H100 machine's first memory plan otherwise."""
    s = _server(tmp_path, "warmed")
    try:
        first = s.call({}, timeout_s=60).result
        second = s.call({}, timeout_s=60).result
    finally:
        s.close()
    assert first["warmed"] == [first["pid"]]
    assert second == first


def test_a_spare_started_under_another_environment_is_not_used(tmp_path, monkeypatch):
    """A spare child inherited this process's environment when it started: after that
    environment changed (a test arming a fault, a variable set between runs), a task must
    get a child that has the new one."""
    from kb_eval.isolation import run_isolated

    env = {"PYTHONPATH": TASKS}
    target = "isolation_tasks:env_var"
    first = run_isolated(target, {"var": "KB_EVAL_TEST_MARK"}, workdir=tmp_path / "a", timeout_s=60, env=env,
                         prewarm=True)  # leaves spares behind for this environment
    monkeypatch.setenv("KB_EVAL_TEST_MARK", "new")
    second = run_isolated(target, {"var": "KB_EVAL_TEST_MARK"}, workdir=tmp_path / "b",
                          timeout_s=60, env=env, prewarm=True)
    assert first.ok and second.ok, (first.error, second.error)
    assert first.result["var"] is None and second.result["var"] == "new"
