"""The speed of light in the report: sol_p beside fast_p, a sample's SOL in its row and
detail, the same fields in to_frame, and the roofline plot per run drawn in a real
headless Chromium with its points where the figure put them (skipped, saying why,
where Chromium is not installed).

The run's records are judged by kb_eval.eval.judge.sol on the bundled problems' real
work counts, against an H200's peaks written as data."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest

from kb_eval.eval.judge.score import summarize
from kb_eval.eval.judge.sol import judge_sol
from kb_eval.harness import load_module
from kb_eval.peaks import PeaksFile
from kb_eval.report.cli import main
from kb_eval.report.roofline import (REFERENCE_COLOUR, SAMPLE_COLOUR, SIZE_IN, DPI,
                                     roofline_png)
from kb_eval.report.text import samples_table, summary_table
from kb_eval.results import (HardwareInfo, Producer, RunFile, SampleRecord, read_model,
                             to_frame, write_json_atomic)
from kb_eval.timing import TimingSettings, TimingStats
from kb_eval.work import count_work
from test_report_html import browse, chromium, console_errors

OPS = Path(__file__).resolve().parents[1] / "reference_kernels" / "problems" / "ops" / "level1"
HW = HardwareInfo(device="cuda", name="NVIDIA H200", slug="nvidia-h200", torch_version="x")
PEAKS = PeaksFile(produced_by=Producer(tool="test"), hardware=HW, copy_bytes_per_s=4.3e12,
                  read_bytes_per_s=4.1e12, cache_bytes=60 << 20,
                  matmul_flops_per_s={"fp32": 5.1e13, "tf32": 3.9e14, "bf16": 7.2e14,
                                      "fp16": 7.3e14})
# problem file, candidate ms, reference ms
TIMES = [("1_matmul_square.py", 3.4, 4.0), ("15_relu.py", 0.09, 0.08),
         ("20_conv2d.py", 1.2, 1.5)]


def _record(pid: int, name: str, ms: float, ref_ms: float) -> SampleRecord:
    work = count_work(load_module((OPS / name).read_text(), "kb_problem"), "fp32")
    r = SampleRecord(key=f"ops/level1/{pid}", level=1, problem_id=pid, name=name,
                     source="ops", status="correct", compiled=True, correct=True,
                     timing=TimingStats.of([ms] * 5), baseline=TimingStats.of([ref_ms] * 5),
                     speedup=ref_ms / ms)
    judge_sol(r, {"work": work.model_dump(), "peaks": PEAKS.model_dump()}, "fp32", True)
    return r


@pytest.fixture(scope="module")
def run_path(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    recs = [_record(int(n.split("_")[0]), n, ms, ref) for n, ms, ref in TIMES]
    asked = [r.key for r in recs]
    run = RunFile(produced_by=Producer(tool="test"), precision="fp32", name="alpha",
                  run="r1", hardware=HW, backend="cuda", source="ops",
                  timing=TimingSettings(), baseline="live", problems_asked=asked,
                  samples=recs, summary=summarize(recs, asked))
    path = root / "alpha" / "r1" / "results.json"
    write_json_atomic(path, run)
    return path


def test_sol_in_summary_rows_and_frame(run_path):
    run = read_model(run_path, RunFile)
    shares = {r.key: r.sol.share for r in run.samples}
    # relu: 256 MiB at 0.09 ms over 4.3 TB/s; the matmul by its FLOPs (fp32 peak)
    assert shares["ops/level1/15"] == pytest.approx(2 * 4096 * 8192 * 4 / 0.09e-3 / 4.3e12)
    assert shares["ops/level1/1"] == pytest.approx(2 * 4096 ** 3 / 3.4e-3 / 5.1e13)
    assert run.samples[0].sol.bound == "compute" and run.samples[1].sol.bound == "memory"
    s = run.summary
    expect = sum(v >= 0.5 for v in shares.values()) / 3
    assert s.sol_p["sol_0.5"] == pytest.approx(expect) and 0 < expect < 1
    assert "sol_0.5" in summary_table(run)
    table = samples_table(run)
    assert f"{100 * shares['ops/level1/15']:.0f}% mem (ref " in table
    df = to_frame(run_path)
    assert {"sol.share", "sol.reference_share", "work.flops", "work.bytes",
            "sol_counted"} <= set(df.columns)
    assert df["work.flops"].tolist()[:1] == [2 * 4096 ** 3]


def test_roofline_in_chromium(run_path, tmp_path):
    exe = chromium()
    page = tmp_path / "report.html"
    assert main(["--results-dir", str(run_path.parents[2]), "--html", str(page)]) == 0
    text = page.read_text()
    found = re.search(r'alt="roofline alpha" src="data:image/png;base64,([^"]+)"', text)
    assert found, "no roofline image in the page"
    dom_run = browse(exe, "--dump-dom", page.as_uri() + "#cell=g0-r0-ops%2Flevel1%2F15")
    assert not console_errors(dom_run), console_errors(dom_run)
    dom = dom_run.stdout
    assert 'data-ready="1"' in dom and '<div id="js-errors"></div>' in dom, dom[-2000:]
    assert "speed of light" in dom and "% mem (ref " in dom  # the clicked sample's SOL
    # The figure alone, at its own size, in Chromium: the points where it drew them.
    png, pixels = roofline_png(read_model(run_path, RunFile), "roofline: alpha")
    assert png == found.group(1) and len(pixels) == 6  # 3 samples, 3 references
    width, height = (round(v * DPI) for v in SIZE_IN)
    alone = tmp_path / "roofline.html"
    alone.write_text(f"<!DOCTYPE html><body style='margin:0;background:#fff'>"
                     f"<img style='display:block' src='data:image/png;base64,{png}'>")
    shot = tmp_path / "roofline.png"
    done = browse(exe, f"--screenshot={shot}", f"--window-size={width},{height}",
                  "--force-device-scale-factor=1", alone.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    from matplotlib import image

    px = image.imread(str(shot))[..., :3]
    px = (px * 255).round().astype(int) if px.dtype != np.uint8 else px.astype(int)
    for x, y, hollow in pixels:
        colour = REFERENCE_COLOUR if hollow else SAMPLE_COLOUR
        rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        patch = px[int(y) - 6:int(y) + 7, int(x) - 6:int(x) + 7]
        near = (np.abs(patch - rgb) < 60).all(axis=-1).sum()
        assert near >= 6, (x, y, hollow, near)  # the marker's own colour is there
        if hollow:  # a ring: its centre is not filled with its colour
            assert (np.abs(px[int(y), int(x)] - rgb) >= 60).any()
    corner = px[:8, :8]
    assert (corner > 235).all()  # and the figure's margin is blank
