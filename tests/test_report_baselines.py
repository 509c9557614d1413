"""python -m kb_eval.report.baselines: eager, torch.compile and TVM files side by side."""

from __future__ import annotations

from kb_eval.cli import run_cli
from kb_eval.report.baselines import main
from kb_eval.results import (BaselineFile, BaselineRecord, HardwareInfo, Producer,
                             baseline_path, write_json_atomic)
from kb_eval.timing import TimingSettings, TimingStats


def write(root, mode, times):
    hw = HardwareInfo.detect("cpu")
    data = BaselineFile(produced_by=Producer(tool="test"), hardware=hw, precision="fp32",
                        timing=TimingSettings(), mode=mode)
    for pid, ms in times.items():
        key = f"ops/level1/{pid}"
        data.records[key] = BaselineRecord(
            key=key, source="ops", level=1, problem_id=pid, name=f"p{pid}",
            status="ok" if ms else "error", error=None if ms else "TVM Relax import failed",
            timing=TimingStats.of([ms]) if ms else None)
    write_json_atomic(baseline_path(root, hw.slug, "fp32", mode, source="ops"), data)


def test_modes_side_by_side(tmp_path, capsys):
    write(tmp_path, "eager", {1: 2.0, 2: 4.0})
    write(tmp_path, "compile-default", {1: 1.0, 2: 4.0})
    write(tmp_path, "tvm", {1: 0.5, 2: None})
    assert run_cli(main, ["--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if ln.startswith("| problem"))
    assert header.split(" | ")[2:] == ["eager ms", "compile-default ms", "compile-default x",
                                       "tvm ms", "tvm x |"]
    assert "| ops/level1/1 | p1 | 2 | 1 | 2.00 | 0.5 | 4.00 |" in out
    assert "| ops/level1/2 | p2 | 4 | 4 | 1.00 | error | - |" in out


def test_no_files_is_one_line(tmp_path, capsys):
    assert run_cli(main, ["--results-dir", str(tmp_path)]) == 2
    assert "no baseline files" in capsys.readouterr().err
