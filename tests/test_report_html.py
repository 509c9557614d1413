"""kb_eval.report across runs: grouping (never ranking across baselines), the latest
complete run per model, to_frame, user mistakes, and the HTML page checked in a real
headless Chromium (skipped, saying why, where Chromium is not installed).

The runs are results.json files written with the real schemas; nothing is evaluated.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from candidates.eval_kit import tuned_config
from kb_eval.eval.judge.score import summarize
from kb_eval.report.cli import main
from kb_eval.results import (Flag, HardwareInfo, Producer, RunFile, SampleRecord,
                             to_frame, write_json_atomic)
from kb_eval.timing import TimingSettings, TimingStats

HW = HardwareInfo(device="cuda", name="NVIDIA H100", slug="nvidia-h100", torch_version="x")


def _stats(ms: float) -> TimingStats:
    return TimingStats(mean=ms, median=ms, std=0.0, min=ms, max=ms, p25=ms, p75=ms, n=10)


def _record(level: int, pid: int, sample: int, speedup: float | None, code: str,
            run_dir: Path, with_path: bool) -> SampleRecord:
    key = f"ops/level{level}/{pid}"
    ok = speedup is not None
    r = SampleRecord(key=key, sample=sample, level=level, problem_id=pid, name=f"Op{pid}",
                     source="ops", status="correct" if ok else "compile_error", compiled=ok,
                     correct=ok, speedup=speedup, error=None if ok else "nvcc: error X",
                     source_sha256=hashlib.sha256(code.encode()).hexdigest(),
                     timing=_stats(1.0 / speedup) if ok else None,
                     baseline=_stats(1.0) if ok else None,
                     flags=[Flag(code="slow_warmup", message="first call slow")] if ok else [])
    rel = Path("code") / f"level{level}_{pid}_sample{sample}_turn0.py"
    (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / rel).write_text(code)
    if with_path:  # as kb_eval.run records it; else found by source_sha256
        r.code_path = rel.as_posix()
    r.prompt_tokens, r.completion_tokens, r.cost = 100, 50, (0.002 if with_path else None)
    if ok:
        r.speedup_ci = [round(speedup * 0.9, 3), round(speedup * 1.1, 3)]
    return r


def write_run(root: Path, model: str, run: str, speedups: dict, *, baseline: str = "file",
              updated: str = "2026-01-01T00:10:00+00:00", missing: int = 0,
              samples_per_problem: int = 1) -> Path:
    """speedups: {(level, problem_id): [speedup or None per sample]}; the last `missing`
    asked samples get no record (an interrupted run)."""
    run_dir = root / model / run
    recs = [_record(lvl, pid, s, x, f"# kernel {model} {run} level{lvl} problem{pid} "
                    f"sample{s}\nclass ModelNew: pass\n", run_dir, with_path=pid % 2 == 1)
            for (lvl, pid), xs in speedups.items() for s, x in enumerate(xs)]
    recs = recs[:len(recs) - missing]
    asked = [f"ops/level{lvl}/{pid}" for lvl, pid in speedups]
    f = RunFile(produced_by=Producer(tool="test"), precision="fp32", name=model, run=run,
                hardware=HW, backend="cuda", source="ops", timing=TimingSettings(),
                baseline="live" if baseline == "live" else
                "results/baseline/nvidia-h100/ops/fp32.json",
                problems_asked=asked, samples_per_problem=samples_per_problem, samples=recs,
                created="2026-01-01T00:00:00+00:00", updated=updated)
    f.summary = summarize(recs, asked, samples_per_problem)
    write_json_atomic(run_dir / "results.json", f)
    return run_dir / "results.json"


FOUR = [(1, 1), (1, 2), (2, 1), (2, 2)]


@pytest.fixture
def results(tmp_path) -> Path:
    root = tmp_path / "results"
    # alpha: an old complete run, the latest complete one, and a newer interrupted one.
    write_run(root, "alpha", "r0", {k: [0.5] for k in FOUR},
              updated="2026-01-01T00:05:00+00:00")
    write_run(root, "alpha", "r1", {k: [x] for k, x in zip(FOUR, [1.5, 2.5, None, 0.9])})
    write_run(root, "alpha", "r2", {k: [9.0] for k in FOUR}, missing=2,
              updated="2026-01-02T00:00:00+00:00")
    # beta: same problems and baseline kind, two samples per problem.
    write_run(root, "beta", "b1", {k: [1.1, None] for k in FOUR}, samples_per_problem=2)
    # gamma: a live baseline and more problems (a different group, however fast).
    write_run(root, "gamma", "g1", {(1, i): [5.0] for i in range(1, 7)}, baseline="live")
    return root


def _groups(out: str) -> dict[str, str]:
    parts = out.split("\n== ")[1:]
    return {p.splitlines()[0]: p for p in parts}


def test_groups_never_mix_baselines_and_latest_complete_run(results, capsys):
    assert main(["--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    groups = _groups(out)
    assert len(groups) == 2, out
    live = next(v for k, v in groups.items() if "baseline live" in k)
    file = next(v for k, v in groups.items() if "baseline file" in k)
    assert "gamma" in live and "alpha" not in live and "beta" not in live
    assert "gamma" not in file
    models = file.split("-- by level")[0]
    assert " r1 " in models and " r0 " not in models and " r2 " not in models
    assert models.index("alpha") < models.index("beta")  # fast_1 50% vs 0%
    assert "left out alpha/r2 (incomplete, 2 asked sample(s) without a record)" in out
    assert "left out alpha/r0 (older than r1)" in out
    assert "50.0%" in models and "$0.0040" in models  # percentages, cost of r1's 2 priced
    assert "0.5" not in models.replace("fast_0.5", "").replace("sol_0.5", "")  # no bare
    assert "sol_0.5" in models  # the speed-of-light columns, "-" for runs without shares


def test_all_runs_markdown_and_csv(results, tmp_path, capsys):
    csv_path = tmp_path / "lb.csv"
    assert main(["--results-dir", str(results), "--all-runs", "--markdown",
                 "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n## ") == 2 and "| model |" in out.replace("| # | model", "| model")
    assert "no (2 missing)" in out
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("hardware,precision,backend,baseline,problem_set,level,#,")
    assert sum(",all," in ln for ln in lines) == 5  # every run, one row each
    gamma = next(ln for ln in lines if ",gamma," in ln and ",all," in ln)
    assert ",-," in gamma and "%" in gamma  # no prices: "-" as in the terminal


def test_empty_selection_is_not_an_error(results, capsys):
    assert main(["--results-dir", str(results), "--precision", "bf16"]) == 0
    assert "no runs under" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--precision", "fp64"], "unknown --precision 'fp64'"),
    (["--model", "nosuch"], "unknown --model 'nosuch'"),
    (["--results-dir", "/nonexistent/kb"], "does not exist"),
    (["--csv", "/nonexistent/dir/lb.csv"], "cannot write /nonexistent/dir/lb.csv"),
    (["--html", "/proc/kb-report.html"], "cannot write /proc/kb-report.html"),
])
def test_user_mistakes_exit_2_with_one_line(results, capsys, args, message):
    from kb_eval.cli import run_cli

    argv = (["--results-dir", str(results)] if "--results-dir" not in args else []) + args
    assert run_cli(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_to_frame_one_row_per_sample_sorted(results):
    df = to_frame(results / "beta" / "b1" / "results.json")
    assert len(df) == 8
    order = list(zip(df["level"], df["problem_id"], df["sample"], df["turn"]))
    assert order == sorted(order)
    assert {"timing.median", "baseline.median", "prompt_tokens", "cost", "flags",
            "model", "baseline_kind"} <= set(df.columns)
    assert df["flags"].iloc[0] == "slow_warmup" and (df["model"] == "beta").all()


# ------------------------------------------------------------------ the page in Chromium
# Where the screenshot of the page is kept after the test (CI artefact, closing notes):
# $KB_EVAL_ARTIFACTS/<name>.png, default /tmp/kb-eval-artifacts/.
ARTIFACTS = Path(os.environ.get("KB_EVAL_ARTIFACTS", "/tmp/kb-eval-artifacts"))


def chromium() -> str:
    """The distribution's Chromium (.ci/run installs it when missing), or a skip that says
    how to get it."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium; .ci/run "
                    "does it): the HTML report is not checked in a browser here")
    return exe


def browse(exe: str, *args: str, width: int = 1200) -> subprocess.CompletedProcess:
    """Headless Chromium with the page's console on stderr (--enable-logging); the window
    is tall enough for two groups' tables and plots in one screenshot."""
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--hide-scrollbars", f"--window-size={width},3000",
           "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def console_errors(done: subprocess.CompletedProcess) -> list[str]:
    """The page's console messages (Chromium logs them as CONSOLE lines) and uncaught
    errors; a clean page has none."""
    return [ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def check_page_in_chromium(page: Path, cell: str, expected: list[str], name: str,
                           plots: bool = True) -> Path:
    """Load the page from disk: no console errors, the heat-map cell `cell` opened as a
    click would (#cell=...) shows the `expected` texts, and a screenshot that shows the
    plots (unless not `plots`: nothing to plot), kept as ARTIFACTS/<name>.png (returned)."""
    exe = chromium()
    shot = page.parent / f"{name}.png"
    done = browse(exe, f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    assert not console_errors(done), console_errors(done)
    dom_run = browse(exe, "--dump-dom", page.as_uri() + "#cell=" + cell)
    dom = dom_run.stdout
    assert not console_errors(dom_run), console_errors(dom_run)
    assert 'data-ready="1"' in dom, dom[-2000:]
    assert '<div id="js-errors"></div>' in dom, dom.split('id="js-errors"')[1][:500]
    for text in expected:
        assert text in dom, text
    if plots:
        _assert_plot_visible(shot)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = ARTIFACTS / shot.name
    shutil.copyfile(shot, kept)
    print(f"screenshot: {kept}")
    return kept


def test_html_report_renders_in_chromium(results, tmp_path):
    page = tmp_path / "report.html"
    assert main(["--results-dir", str(results), "--html", str(page)]) == 0
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<link" not in text
    assert text.count("data:image/png;base64,") == 4  # 2 figures x 2 groups
    # The cell of alpha's ops/level1/1: its verdict, flag, interval and code.
    check_page_in_chromium(page, "g0-r0-ops%2Flevel1%2F1", [
        "# kernel alpha r1 level1 problem1 sample0",
        "warning: slow_warmup - first call slow", "[1.35-1.65]"], name="report-synthetic")


def _assert_plot_visible(shot: Path) -> None:
    """The screenshot shows a matplotlib figure: many pixels of its first line colour
    (C0, #1f77b4, used by nothing else on the page) and a varied, non-blank image."""
    import numpy as np
    from matplotlib import image

    px = image.imread(str(shot))[..., :3]
    if px.dtype != np.uint8:
        px = (px * 255).round().astype(int)
    blue = (np.abs(px - np.array([0x1F, 0x77, 0xB4])) < 40).all(axis=-1).sum()
    non_white = (px < 235).any(axis=-1).mean()
    colours = len(np.unique(px.reshape(-1, 3)[::7], axis=0))
    # non-white: 5 % of a 2000 px tall window, in the 3000 px one
    assert blue > 300 and non_white > 0.033 and colours > 50, (blue, non_white, colours)


# ------------------------------------------------------------------ an eval run's page
ADD = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):  # problem {pid}
        return 2 * x + y
"""


@pytest.fixture(scope="module")
def eval_results(tmp_path_factory) -> Path:
    """A real `python -m kb_eval.eval` run (Python-only candidates, CPU) over problems 6
    and 10 of a KernelBench-layout folder: ids whose text order is not their number's."""
    import sys

    root = tmp_path_factory.mktemp("eval-report")
    problem = (Path(__file__).parent / "candidates" / "problems" / "level1" /
               "1_ScaleAdd.py").read_text()
    (root / "problems" / "level1").mkdir(parents=True)
    (root / "kernels").mkdir()
    for pid in (6, 10):
        (root / "problems" / "level1" / f"{pid}_ScaleAdd.py").write_text(problem)
        (root / "kernels" / f"level1_problem{pid}_sample0.py").write_text(ADD.format(pid=pid))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")])),
        **tuned_config(root / "config", correct_trials=2)}
    done = subprocess.run([sys.executable, "-m", "kb_eval.eval", "--candidates",
                           str(root / "kernels"), "--source", str(root / "problems"),
                           "--backend", "cpp", "--live-baseline", "--trials", "2", "--quiet",
                           "--results-dir", str(root / "results"), "--run", "e1"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "results"


def test_eval_run_keeps_its_code(eval_results):
    """eval copies each candidate into the run's code/ folder and records code_path."""
    import json

    run_dir = eval_results / "kernels" / "e1"
    samples = json.loads((run_dir / "results.json").read_text())["samples"]
    for s in samples:
        assert "# problem %d" % s["problem_id"] in (run_dir / s["code_path"]).read_text()


def test_eval_run_page_in_chromium(eval_results, tmp_path):
    """The eval run's cell opens its code; problems in numeric order (6 before 10)."""
    page = tmp_path / "eval-report.html"
    assert main(["--results-dir", str(eval_results), "--html", str(page)]) == 0
    text = page.read_text()
    heat = text.split("<table class=heat>")[1]
    assert heat.index("level1/6<") < heat.index("level1/10<")
    source = heat.split("data-cell=\"g0-r0-")[1].split("/")[0]  # the problems' source
    cell = f"g0-r0-{source}%2Flevel1%2F10"
    check_page_in_chromium(page, cell, ["# problem 10", "class ModelNew"], name="report-eval",
                           plots=False)  # PyTorch-only answers: no speedup counted
    # The code is in the opened panel (the page's data holds it too, unopened).
    dom = browse(chromium(), "--dump-dom", page.as_uri() + "#cell=" + cell).stdout
    panel = dom.split('<aside id="detail"')[1].split("</aside>")[0]
    assert '<pre class="code">' in panel and "# problem 10" in panel, panel[:2000]
    assert "warning: no_custom_kernel" in panel  # why its speedup is not counted


def test_models_table_fits_1400_px_without_scrolling(results, tmp_path):
    """At a 1400 px window every table's box is as wide as what it holds: no sideways
    scroll hiding pass@k, tokens or cost (measured by Chromium on a copy of the page)."""
    page = tmp_path / "report.html"
    assert main(["--results-dir", str(results), "--all-runs", "--html", str(page)]) == 0
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", (
        "<script>document.body.dataset.overflow=Array.from(document.querySelectorAll("
        "'.wide')).map(function(w){return w.scrollWidth-w.clientWidth;}).join(',');"
        "</script></body>")))
    dom = browse(chromium(), "--dump-dom", probe.as_uri(), width=1400).stdout
    overflow = dom.split('data-overflow="')[1].split('"')[0].split(",")
    assert len(overflow) == 4 and all(int(x) <= 0 for x in overflow), overflow


def test_log_axis_ticks_read_as_speedups():
    """0.98x, 1x, not 9.8x10^-1: the speedup axis's labels, on a narrow and a wide range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kb_eval.report.plots import times_ticks

    for lo, hi, expected in ((0.97, 1.03, {"0.98×", "1×", "1.02×"}),
                             (0.3, 5.0, {"0.3×", "1×", "2×"})):
        fig, ax = plt.subplots()
        ax.scatter([lo, hi], [1, 1])
        ax.set_xscale("log")
        times_ticks(ax.xaxis)
        fig.canvas.draw()
        low, high = ax.get_xlim()
        shown = {t.get_text() for minor in (False, True)
                 for t in ax.get_xticklabels(minor=minor)
                 if t.get_text() and low <= t.get_position()[0] <= high}
        plt.close(fig)
        assert expected <= shown and not any("10" in t and "^" in t for t in shown), shown
