"""kb_eval.report: the run summary table and the leaderboard across runs (no evaluation:
records are made by hand)."""

from __future__ import annotations

from kb_eval.eval.judge.score import summarize
from kb_eval.report import main, summary_table, usage_totals
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
