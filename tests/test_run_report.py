"""kb_eval.report: the run summary table and the leaderboard across runs (records made
by hand), and one report over real runs against the local test server, checked in
Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from kb_eval.eval.judge.score import summarize
from kb_eval.report import main, summary_table, usage_totals
from kb_eval.report import main as report_main
from kb_eval.results import HardwareInfo, Producer, RunFile, SampleRecord, write_json_atomic
from kb_eval.timing import TimingSettings


def run_file(name: str, run: str, speedups: list, precision: str = "fp32") -> RunFile:
    samples = []
    for i, speedup in enumerate(speedups, start=1):
        r = SampleRecord(key=f"bert/level1/{i}", level=1, problem_id=i,
                         status="correct" if speedup else "compile_error",
                         compiled=bool(speedup), correct=bool(speedup), speedup=speedup)
        r.prompt_tokens, r.completion_tokens, r.cost = 1000, 500, 0.01
        r.response_cached = i == 1
        samples.append(r)
    asked = [s.key for s in samples]
    f = RunFile(produced_by=Producer(tool="test"), precision=precision, name=name, run=run,
                hardware=HardwareInfo(device="cpu", name="cpu", slug="cpu", torch_version="x"),
                backend="cpp", source="bert", problems_asked=asked, samples=samples,
                timing=TimingSettings())
    f.summary = summarize(samples, asked)
    return f


def test_usage_totals_and_summary_table():
    f = run_file("m", "r", [2.5, None, 0.5])
    usage = usage_totals(f.samples)
    assert usage["answers"] == 3 and usage["cached_answers"] == 1
    assert usage["prompt_tokens"] == 3000 and usage["cost_usd"] == 0.03
    table = summary_table(f)
    for line in ("fast_1                         33.3%", "compiled rate                  66.7%",
                 "pass@1                         66.7%", "cost                           $0.0300",
                 "tokens (prompt + completion)   4500 (3000 + 1500)"):
        assert line in table, table


def test_pytorch_only_answer_does_not_look_like_a_win():
    """A correct answer flagged no_custom_kernel: its row says the speedup is not counted,
    the interval column is labelled, and the summary says why fast_p and the geomean
    count nothing; a long error is cut with an ellipsis."""
    from kb_eval.report import samples_table
    from kb_eval.results import Flag

    f = run_file("m", "r", [1.01, None])
    ok, broken = f.samples
    ok.flags = [Flag(code="no_custom_kernel", severity="warning", message="PyTorch ops only")]
    ok.speedup_ci = [0.91, 1.07]
    broken.error = "main.cpp:17:11: error: " + "x" * 200
    f.summary = summarize(f.samples, f.problems_asked)
    table = samples_table(f).splitlines()
    assert "speedup [95% CI]" in table[0] and "error / not counted" in table[0]
    assert "1.01x [0.91-1.07]" in table[1] and \
        table[1].endswith("speedup not counted: no_custom_kernel"), table[1]
    assert table[2].endswith("x…") and len(table[2].split("main.cpp")[1]) < 70, table[2]
    summary = summary_table(f)
    assert "fast_0                         0.0%" in summary, summary
    assert "- (no speedup counted)" in summary
    assert "speedups not counted           no_custom_kernel 1 (fast_p, geomean)" in summary


def test_leaderboard_groups_and_sorts(tmp_path, capsys):
    for f in (run_file("weak", "a", [None, 0.5]), run_file("strong", "b", [3.0, 1.5]),
              run_file("half", "c", [1.2, 1.1], precision="bf16")):
        write_json_atomic(tmp_path / f.name / f.run / "results.json", f)
    (tmp_path / "broken" / "x").mkdir(parents=True)
    (tmp_path / "broken" / "x" / "results.json").write_text("{not json")
    assert main(["--results-dir", str(tmp_path), "--csv", str(tmp_path / "lb.csv")]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "skipping" in captured.err  # the broken file, named on stderr
    assert "== cpu / fp32 / cpp / baseline unknown / bert (2 problems" in out and "/ bf16 /" in out
    fp32 = out.split("== cpu / fp32")[1]
    assert fp32.index("strong") < fp32.index("weak")  # best fast_1 first
    rows = (tmp_path / "lb.csv").read_text().splitlines()
    assert sum(",all," in row for row in rows) == 3  # one leaderboard row per run


# ------------------------------------------------------------------ real runs, one report
def _two_model_config(tmp_path: Path, problems: Path, cache: Path, base_url: str) -> Path:
    """Two models on the local scripted server (they differ in the model id asked)."""
    models = ", ".join(
        f"dict(name={name!r}, base_url={base_url!r}, model={name!r}, api_key_env=None, "
        f"max_concurrency=2, timeout_s=120, price_in_per_mtok=1.0, price_out_per_mtok=2.0)"
        for name in ("scripted-a", "scripted-b"))
    path = tmp_path / "config.py"
    path.write_text(f"MODELS = [{models}]\n"
                    f"DEFAULTS = dict(source={str(problems)!r}, backend='cpp', "
                    f"results_dir={str(tmp_path / 'results')!r}, cache_dir={str(cache)!r}, "
                    f"warmup=1, cpu_trials=2, correct_trials=2, run_timeout_s=120)\n")
    return path


@pytest.mark.slow
def test_report_of_real_runs_in_chromium(tmp_path, build_cache_dir, monkeypatch, capsys):
    """Three runs of `python -m kb_eval.run` against the local test server (two models,
    2 and 4 problems, one answered in C++ and timed, a live baseline and a baseline file made by `python -m
    kb_eval.baseline`), reported together: a group per baseline kind and problem set,
    and the HTML page checked in Chromium."""
    from openai_server import reply
    from test_report_html import check_page_in_chromium
    from test_run_pipeline import (CPP_SCALE_ADD, PROBLEM, PROBLEMS, RoutedServer,
                                   python_answer)

    from kb_eval.baseline.__main__ import main as baseline_main
    from kb_eval.cli import run_cli
    from kb_eval.run import main as run_main

    level = tmp_path / "problems" / "level1"
    level.mkdir(parents=True)
    for pid, (file, args, expr, inputs) in PROBLEMS.items():
        level.joinpath(file).write_text(PROBLEM.format(
            marker=f"PROBLEM_{pid}", doc=expr, args=args, expr=expr, inputs=inputs))

    def route(pid, turn, body):  # a C++ kernel for problem 1 (timed), b gets 3 wrong
        wrong = body["model"] == "scripted-b" and pid == 3
        text = (f"```python\n{CPP_SCALE_ADD}\n```" if pid == 1 else
                python_answer(pid, "x + 1" if wrong else None))
        return reply(text, prompt_tokens=100, completion_tokens=20)

    with RoutedServer(route) as server:
        monkeypatch.setenv("KB_EVAL_CONFIG", str(_two_model_config(
            tmp_path, tmp_path / "problems", build_cache_dir, server.base_url)))
        assert run_cli(run_main, ["--model", "scripted-a", "--problems", "1-2", "--quiet",
                                  "--run", "small-live"]) == 0
        assert run_cli(baseline_main, ["--problems", "1-4", "--quiet"]) == 0
        for model in ("scripted-a", "scripted-b"):
            assert run_cli(run_main, ["--model", model, "--problems", "1-4", "--quiet",
                                      "--run", "four-file"]) == 0
    out = capsys.readouterr().out
    assert "timing the PyTorch reference live" in out  # the first run, before the file
    results = tmp_path / "results"
    page = tmp_path / "report.html"
    assert run_cli(report_main, ["--results-dir", str(results), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    groups = out.split("\n== ")[1:]
    assert len(groups) == 2, out
    live = next(g for g in groups if "baseline live" in g.splitlines()[0])
    file = next(g for g in groups if "baseline file" in g.splitlines()[0])
    assert "(2 problems" in live and "scripted-b" not in live
    assert "(4 problems" in file and file.index("scripted-a") < file.index("scripted-b")
    models = file.split("-- by level")[0]
    assert "100.0%" in models and "75.0%" in models  # correct: a 4/4, b 3/4
    # The heat map's cell of scripted-b's wrong answer: its verdict and its code.
    data = json.loads(re.search(r'id=kb-data>(.*?)</script>', page.read_text(),
                                re.S).group(1))
    cell = next(cid for cid, c in data["cells"].items()
                if c["model"] == "scripted-b" and c["problem"].endswith("/3"))
    check_page_in_chromium(page, quote(cell, safe=""), ["incorrect", "return x + 1"],
                           name="report-real-runs")
