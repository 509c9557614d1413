"""python -m kb_eval.run end to end on CPU against a scripted local OpenAI-compatible server
(tests/openai_server.py, the real openai SDK over HTTP): results.json, per-sample errors of
unusable answers, multi-turn feedback, the response cache, resume after a kill, a missing
key. Problems are tiny (a tmp KernelBench-layout folder); answers are Python-only ModelNew
files, except one C++ source (shared with the eval tests) that compiles once per cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from openai_server import ScriptedServer, error, reply

from kb_eval.cli import run_cli
from kb_eval.run import main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
KEY_ENV = "KB_RUN_TEST_KEY"
CPP_SCALE_ADD = (REPO / "tests" / "candidates" / "cpp" / "level1_problem1_sample0.py").read_text()
CPP_BROKEN = (REPO / "tests" / "candidates" / "cpp" / "level1_problem1_sample3.py").read_text()

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """{marker}: {doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''
# id -> (file name, forward args, expression, inputs); marker PROBLEM_<id> routes answers.
PROBLEMS = {
    1: ("1_ScaleAdd.py", "x, y", "2 * x + y", "torch.randn(64, 128), torch.randn(64, 128)"),
    2: ("2_Relu.py", "x", "torch.relu(x)", "torch.randn(32, 64)"),
    3: ("3_Square.py", "x", "x * x", "torch.randn(32, 64)"),
    4: ("4_Tanh.py", "x", "torch.tanh(x)", "torch.randn(32, 64)"),
    5: ("5_Neg.py", "x", "-x", "torch.randn(32, 64)"),
}


def python_answer(pid: int, expr: str | None = None) -> str:
    _, args, ref_expr, _ = PROBLEMS[pid]
    code = textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()

            def forward(self, {args}):
                return {expr or ref_expr}
        ''')
    return f"Here is my kernel.\n\n```python\n{code}```\n"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


class RoutedServer(ScriptedServer):
    """Answers by what is asked: route(problem id, turn, request body) -> Reply."""

    def __init__(self, route):
        super().__init__()
        self.route = route

    def _next_reply(self, request):
        super()._next_reply(request)  # records the request, counts it in flight
        body = request["body"]
        return self.route(problem_of(body), turn_of(body), body)

    def problems_asked(self) -> list[int]:
        return [problem_of(r["body"]) for r in self.requests]


def problem_of(body: dict) -> int:
    text = body["messages"][1]["content"]
    return next(pid for pid in PROBLEMS if f"PROBLEM_{pid}:" in text)


def turn_of(body: dict) -> int:
    return (len(body["messages"]) - 2) // 2


# ------------------------------------------------------------------ fixtures
@pytest.fixture
def problems_dir(tmp_path) -> Path:
    level = tmp_path / "problems" / "level1"
    level.mkdir(parents=True)
    for pid, (file, args, expr, inputs) in PROBLEMS.items():
        (level / file).write_text(PROBLEM.format(marker=f"PROBLEM_{pid}", doc=expr, args=args,
                                                 expr=expr, inputs=inputs))
    return level.parent


def write_config(tmp_path: Path, problems_dir: Path, cache_dir: Path, base_url: str,
                 concurrency: int = 2, key_env: str = KEY_ENV) -> Path:
    path = tmp_path / "config.py"
    path.write_text(textwrap.dedent(f"""\
        MODELS = [dict(name="scripted", base_url={base_url!r}, model="test-model",
                       api_key_env={key_env!r}, max_concurrency={concurrency},
                       timeout_s=120, price_in_per_mtok=1.0, price_out_per_mtok=2.0)]
        DEFAULTS = dict(source={str(problems_dir)!r}, backend="cpp",
                        results_dir={str(tmp_path / 'results')!r}, cache_dir={str(cache_dir)!r},
                        warmup=1, cpu_trials=2, correct_trials=2, run_timeout_s=120,
                        build_timeout_s=300)
        """))
    return path


@pytest.fixture
def setup(tmp_path, problems_dir, build_cache_dir, monkeypatch):
    """Start a routed server with `route` and point KB_EVAL_CONFIG at it."""
    servers = []

    def start(route, **kw) -> RoutedServer:
        server = RoutedServer(route).__enter__()
        servers.append(server)
        config = write_config(tmp_path, problems_dir, build_cache_dir, server.base_url, **kw)
        monkeypatch.setenv("KB_EVAL_CONFIG", str(config))
        monkeypatch.setenv(KEY_ENV, "test-key")
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def results_of(tmp_path: Path, run: str) -> dict:
    return json.loads((tmp_path / "results" / "scripted" / run / "results.json").read_text())


def by_slot(results: dict) -> dict:
    return {(s["problem_id"], s["sample"], s["turn"]): s for s in results["samples"]}


def run_main(*argv: str) -> int:
    return run_cli(main, ["--model", "scripted", *argv])


# ------------------------------------------------------------------ tests
ANSWERS = {1: fenced(CPP_SCALE_ADD),                       # C++ kernel: correct
           2: python_answer(2),                            # Python-only: correct
           3: "I am sorry, I cannot write that kernel.",   # no code
           4: fenced("class ModelNew(nn.Module):\n    def forward(self, x)\n        return x"),
           5: fenced("import torch\nprint('no model here')")}


def test_results_json_fields_errors_and_summary(setup, tmp_path, capsys):
    server = setup(lambda pid, turn, body: reply(ANSWERS[pid], prompt_tokens=100 * pid,
                                                 completion_tokens=10 * pid))
    assert run_main("--run", "r1") == 0
    out = capsys.readouterr().out
    results = results_of(tmp_path, "r1")
    run_dir = tmp_path / "results" / "scripted" / "r1"
    samples = by_slot(results)
    assert sorted(samples) == [(pid, 0, 0) for pid in range(1, 6)]
    assert sorted(server.problems_asked()) == [1, 2, 3, 4, 5]

    for pid in (1, 2):  # evaluated, correct, timed
        s = samples[(pid, 0, 0)]
        assert (s["status"], s["compiled"], s["correct"]) == ("correct", True, True), s
        assert s["timing"]["n"] == 2 and s["baseline"]["n"] >= 1 and s["speedup"] > 0
        assert s["code_path"] == f"code/level1_problem{pid}_sample0_turn0.py"
        assert (run_dir / s["code_path"]).read_text().strip() in ANSWERS[pid]
    assert samples[(1, 0, 0)]["build"]["status"] == "ok"  # the C++ one really built
    expected = {3: "no_code", 4: "syntax_error", 5: "no_model_new"}
    for pid, status in expected.items():  # not evaluated: an error kind and a message
        s = samples[(pid, 0, 0)]
        assert (s["status"], s["compiled"], s["correct"], s["timing"]) == (status, False, False, None)
        assert s["error"] and s["build"] is None
    assert samples[(3, 0, 0)]["code_path"] is None
    assert (run_dir / samples[(4, 0, 0)]["code_path"]).is_file()  # kept for a look
    for pid, s in ((p, samples[(p, 0, 0)]) for p in PROBLEMS):
        assert (s["prompt_tokens"], s["completion_tokens"]) == (100 * pid, 10 * pid)
        assert s["cost"] == pytest.approx((100 * pid * 1.0 + 10 * pid * 2.0) / 1e6)
        assert s["latency_s"] > 0 and s["response_cached"] is False and s["model"] == "scripted"

    summary = results["summary"]
    assert summary["problems"] == 5 and summary["samples"] == 5
    assert summary["compiled_rate"] == pytest.approx(0.4)
    assert summary["correct_rate"] == pytest.approx(0.4)
    assert summary["pass_at_k"]["pass@1"] == pytest.approx(0.4)
    assert summary["status_counts"] == {"correct": 2, "no_code": 1, "syntax_error": 1,
                                        "no_model_new": 1}
    usage = results["usage"]
    assert usage["prompt_tokens"] == 1500 and usage["completion_tokens"] == 150
    assert usage["cost_usd"] == pytest.approx((1500 + 300) / 1e6)
    assert results["produced_by"]["tool"] == "kb_eval.run"
    assert results["baseline"] == "live"  # no baseline file in the tmp results: timed live
    assert results["run_args"]["samples"] == 1 and results["run_args"]["prompt"] == "one_shot"
    assert len(list((run_dir / "responses").glob("*.json"))) == 5
    for word in ("fast_1", "fast_2", "geomean speedup", "pass@1", "compiled rate", "cost",
                 "tokens"):
        assert word in out


def test_multi_turn_feeds_back_each_failure(setup, tmp_path):
    """Turn 0 fails (a mismatch; a compile error), turn 1 is asked with that feedback."""
    def route(pid, turn, body):
        if turn == 0:
            return reply(python_answer(1, "3 * x + y") if pid == 1 else fenced(CPP_BROKEN))
        return reply(python_answer(pid))

    server = setup(route)
    assert run_main("--problems", "1,2", "--turns", "2", "--run", "mt") == 0
    results = results_of(tmp_path, "mt")
    samples = by_slot(results)
    assert sorted(samples) == [(1, 0, 0), (1, 0, 1), (2, 0, 0), (2, 0, 1)]
    assert samples[(1, 0, 0)]["status"] == "incorrect"
    assert samples[(2, 0, 0)]["status"] == "compile_error"
    assert samples[(1, 0, 1)]["status"] == samples[(2, 0, 1)]["status"] == "correct"
    assert results["summary"]["correct_rate"] == 1.0  # the last turn is scored

    second = {problem_of(r["body"]): r["body"]["messages"] for r in server.requests
              if turn_of(r["body"]) == 1}
    first = {problem_of(r["body"]): r["body"]["messages"] for r in server.requests
             if turn_of(r["body"]) == 0}
    for pid in (1, 2):  # the history, then the answer, then the feedback
        messages = second[pid]
        assert messages[:2] == first[pid]
        assert messages[2]["role"] == "assistant"
        assert "class ModelNew" in messages[2]["content"]
        assert messages[3]["role"] == "user"
    mismatch, build = second[1][3]["content"], second[2][3]["content"]
    assert "do not match the reference" in mismatch and "max absolute difference" in mismatch
    assert "failed to build" in build and "error" in build.lower()


def test_cache_serves_rerun_and_resume_asks_only_new_turns(setup, tmp_path):
    server = setup(lambda pid, turn, body: reply(python_answer(pid)))
    assert run_main("--problems", "2", "--run", "c") == 0
    assert len(server.requests) == 1
    results_path = tmp_path / "results" / "scripted" / "c" / "results.json"
    first = results_of(tmp_path, "c")

    results_path.unlink()  # rerun the same run from scratch: every answer is cached
    assert run_main("--problems", "2", "--run", "c") == 0
    assert len(server.requests) == 1
    [again] = results_of(tmp_path, "c")["samples"]
    assert again["response_cached"] is True and again["status"] == "correct"
    assert again["prompt_tokens"] == first["samples"][0]["prompt_tokens"]

    # One more turn: turn 0 is neither evaluated nor asked again, only turn 1 is asked.
    assert run_main("--resume", "--run", "c", "--turns", "2") == 0
    assert [turn_of(r["body"]) for r in server.requests] == [0, 1]
    samples = by_slot(results_of(tmp_path, "c"))
    assert sorted(samples) == [(2, 0, 0), (2, 0, 1)]
    assert samples[(2, 0, 0)]["finished"] == again["finished"]


def test_samples_pass_at_k(setup, tmp_path):
    """k answers per problem; pass@k from the last turn of each sample."""
    server = setup(lambda pid, turn, body: reply(python_answer(pid)))
    assert run_main("--problems", "3", "--samples", "2", "--run", "k") == 0
    results = results_of(tmp_path, "k")
    assert sorted(by_slot(results)) == [(3, 0, 0), (3, 1, 0)]
    assert results["summary"]["pass_at_k"] == {"pass@1": 1.0}
    assert len(server.requests) == 2  # same prompt, two samples: two requests


def test_unanswered_run_is_failed_not_scored_and_resume_asks_again(setup, tmp_path, capsys):
    """Every request refused by the server (HTTP 400): the run records inference_error
    for each sample; the report never ranks it as scored; --resume asks again, and its
    progress bar counts only what this session did."""
    from kb_eval.report.cli import main as report_main

    answered = set()
    setup(lambda pid, turn, body: reply(python_answer(pid)) if pid in answered
          else error(400, message="prompt too long"))
    assert run_main("--problems", "2-3", "--run", "f") == 0
    assert {s["status"] for s in results_of(tmp_path, "f")["samples"]} == {"inference_error"}
    capsys.readouterr()
    assert run_cli(report_main, ["--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "left out scripted/f (failed: every sample an inference_error" in out, out
    assert "no complete runs" in out
    assert run_cli(report_main, ["--results-dir", str(tmp_path / "results"),
                                 "--all-runs"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if " f " in ln)
    assert row.lstrip().startswith("- ") and "failed: no answers" in row, row

    answered.add(2)  # one answer this time, the other refused again
    assert run_main("--resume", "--run", "f") == 0
    answered.add(3)
    capsys.readouterr()
    assert run_main("--resume", "--run", "f") == 0
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    last = [ln for ln in bar if "answered" in ln][-1]
    # problem 2 was recorded by the session before: not in this session's counts
    assert "1/1" in last and "answered 1 compiled 1 correct 1" in last, last
    statuses = {s["problem_id"]: s["status"] for s in results_of(tmp_path, "f")["samples"]}
    assert statuses == {2: "correct", 3: "correct"}


def _child_env(config: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    return {**env, "KB_EVAL_CONFIG": str(config), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **extra}


def test_resume_after_kill(tmp_path, problems_dir, build_cache_dir):
    """Kill a run after its first record; --resume asks only what was never answered and
    evaluates only what was never recorded; the file ends complete, each sample once."""
    slow = {"on": True}

    def route(pid, turn, body):
        delay = 60.0 if slow["on"] and pid >= 3 else 0.0
        return reply(python_answer(pid), delay_s=delay)

    with RoutedServer(route) as server:
        config = write_config(tmp_path, problems_dir, build_cache_dir, server.base_url,
                              concurrency=1)
        env = _child_env(config, **{KEY_ENV: "k"})
        cmd = [sys.executable, "-m", "kb_eval.run", "--model", "scripted", "--run", "kill",
               "--problems", "1-4"]
        path = tmp_path / "results" / "scripted" / "kill" / "results.json"
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while not (path.exists() and json.loads(path.read_text())["samples"]):
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "no sample recorded in time"
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        recorded = {s["problem_id"] for s in json.loads(path.read_text())["samples"]}
        asked_before = server.problems_asked()
        # 1 and 2 answered at once, either may be evaluated first; 3 was still being asked.
        assert recorded and recorded <= {1, 2} and asked_before[:2] == [1, 2]

        slow["on"] = False
        n_before = len(server.requests)
        # No flags but --resume: the latest run, with the selection it was started with.
        resume = [sys.executable, "-m", "kb_eval.run", "--model", "scripted", "--resume"]
        done = subprocess.run(resume, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        asked_after = server.problems_asked()[n_before:]

    # 1 and 2 were answered before the kill (cached): not asked again; 3 and 4 were not.
    assert sorted(asked_after) == [3, 4]
    results = json.loads(path.read_text())
    slots = [(s["problem_id"], s["sample"], s["turn"]) for s in results["samples"]]
    assert sorted(slots) == [(pid, 0, 0) for pid in (1, 2, 3, 4)]  # each exactly once
    assert [s["status"] for s in results["samples"]] == ["correct"] * 4, results["samples"]
    assert results["summary"]["problems"] == 4 and results["summary"]["correct_rate"] == 1.0
    cached = {s["problem_id"]: s["response_cached"] for s in results["samples"]}
    assert cached[3] is False and cached[4] is False
    assert results["run_args"]["problems"] == "1-4"
    assert [k.split("/", 1)[1] for k in results["problems_asked"]] == [
        f"level1/{pid}" for pid in (1, 2, 3, 4)]


def test_missing_key_one_line_exit_2(tmp_path, problems_dir, build_cache_dir):
    config = write_config(tmp_path, problems_dir, build_cache_dir, "http://127.0.0.1:9/v1")
    done = subprocess.run([sys.executable, "-m", "kb_eval.run", "--model", "scripted"],
                          cwd=tmp_path, env=_child_env(config), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and KEY_ENV in lines[0] and lines[0].startswith("error:")
    assert not (tmp_path / "results").exists()


def test_list_models_and_flag_errors(setup, tmp_path, capsys, monkeypatch):
    setup(lambda pid, turn, body: reply("unused"))
    assert run_cli(main, ["--list-models"]) == 0
    out = capsys.readouterr().out
    assert "scripted" in out and f"{KEY_ENV} (set)" in out and "reference" in out
    monkeypatch.delenv(KEY_ENV)
    assert run_cli(main, ["--list-models"]) == 0
    assert f"{KEY_ENV} (NOT set)" in capsys.readouterr().out
    monkeypatch.setenv(KEY_ENV, "k")
    for argv, message in ((["--model", "scripted", "--turns", "0"], "--turns must be at least 1"),
                          (["--model", "scripted", "--run", "a/b"], "--run 'a/b'"),
                          (["--model", "scripted", "--resume"], "no run under"),
                          (["--model", "nope"], "unknown model 'nope'")):
        assert run_cli(main, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "results").exists()
