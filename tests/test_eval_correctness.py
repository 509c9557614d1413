"""The outputs files, the comparison (as the reference side runs it), the guards, the build helpers and candidate discovery
(in-process, no children)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from kb_eval.errors import UserError
from kb_eval.eval.judge.crashes import crash_info
from kb_eval.eval.child.build_task import trim_compiler_output
from kb_eval.eval.schedule.build import cache_key, needs_build, quick_check
from kb_eval.eval.candidates import find_candidates
from kb_eval.eval.wire import outputs
from kb_eval.eval.judge.correctness import compare_outputs, info_from_diffs, judge_file, tolerances
from kb_eval.eval.child.observe import OutputTypeError, observe, output_tensors
from kb_eval.eval.judge.guards import judge
from kb_eval.isolation import ChildOutcome


def test_tolerances_per_precision_and_override():
    assert tolerances("fp32") == (1e-4, 1e-4)
    assert tolerances("fp16") == (1e-2, 1e-2)
    assert tolerances("bf16") == (2e-2, 2e-2)
    assert tolerances("fp32", atol=1e-3) == (1e-3, 1e-4)


def test_compare_within_and_beyond_tolerance():
    ref = torch.ones(4, 4)
    ok = compare_outputs([ref + 5e-5], [ref], 1e-4, 1e-4)
    assert ok.ok and ok.max_abs == pytest.approx(5e-5, rel=1e-2)
    bad = compare_outputs([ref + 1e-3], [ref], 1e-4, 1e-4)
    assert not bad.ok and "16/16 values beyond" in bad.error


def test_rtol_scales_with_reference():
    ref = torch.full((3,), 1000.0)
    assert compare_outputs([ref + 0.05], [ref], 1e-4, 1e-4).ok  # 0.05 <= 1e-4 + 0.1


@pytest.mark.parametrize("out,msg", [
    (torch.ones(2, 3), "shape (2, 3) != expected (3, 2)"),
    (torch.ones(3, 2, dtype=torch.float16), "dtype torch.float16 != expected torch.float32"),
])
def test_shape_and_dtype_mismatch(out, msg):
    d = compare_outputs([out], [torch.ones(3, 2)], 1e-2, 1e-2)
    assert not d.ok and msg in d.error


def test_nan_and_inf_must_match():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert compare_outputs([ref.clone()], [ref], 1e-4, 1e-4).ok
    nan_out = torch.tensor([float("nan"), float("nan"), float("inf"), 2.0])
    assert "NaN at 1 positions" in compare_outputs([nan_out], [ref], 1e-4, 1e-4).error
    inf_out = torch.tensor([1.0, float("nan"), float("-inf"), 2.0])
    assert "Inf at 1 positions" in compare_outputs([inf_out], [ref], 1e-4, 1e-4).error


def test_statistics_count_finite_positions_only_and_leave_the_tensors_alone():
    """A position where either side is NaN or Inf is judged by where it sits and counts in
    no statistic, under both rules (hand-worked below); and the comparison works on its
    own temporaries: float64 tensors (whose `.double()` is themselves) come out unchanged."""
    from kb_eval.eval.judge.correctness import compare_tensor
    from kb_eval.eval.judge.truth import K, K_NORM, compare_truth

    nan, inf = float("nan"), float("inf")
    ref = torch.tensor([1.0, nan, inf, 2.0, 4.0], dtype=torch.float64)
    out = torch.tensor([1.5, nan, inf, 2.0, 3.0], dtype=torch.float64)
    truth = ref.clone()  # the reference exact: E = 0, S = 0
    before = [t.clone() for t in (ref, out, truth)]

    d = compare_tensor(out, ref, atol=0.1, rtol=0.0)
    assert (d.count, d.max_abs, d.sum_abs, d.max_rel) == (3, 1.0, 1.5, 0.5)
    assert "2/5 values beyond" in d.error

    f = compare_truth(out, ref, truth)
    u, m = 2.0 ** -53, (21 / 3) ** 0.5  # float64's unit roundoff; rms of the finite truth
    assert f["ratio"] == pytest.approx(max(0.5 / (K * u * (1 + m)), 1.0 / (K * u * (4 + m))))
    assert f["norm_ratio"] == pytest.approx(1.25 ** 0.5 / (K_NORM * u * 21 ** 0.5))
    assert "2/5 values beyond" in f["error"] and not f["ok"]
    for now, then in zip((ref, out, truth), before):
        assert torch.equal(now.nan_to_num(), then.nan_to_num())
        assert torch.equal(now.isnan(), then.isnan())


def test_output_count_and_integer_outputs():
    assert "1 output tensor(s), expected 2" in compare_outputs(
        [torch.ones(1)], [torch.ones(1), torch.ones(1)], 0, 0).error
    ints = torch.arange(5)
    assert compare_outputs([ints.clone()], [ints], 1e-4, 1e-4).ok
    assert not compare_outputs([ints + 1], [ints], 1e-4, 1e-4).ok


def _write(path, tensors):
    outputs.write(path, tensors)
    return path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.bool, torch.complex64])
def test_outputs_round_trip(tmp_path, dtype):
    ts = [torch.randn(3, 5).to(dtype), torch.randn(7).to(dtype)[::2], torch.tensor(1).to(dtype),
          torch.empty(0, 4, dtype=dtype)]
    back = outputs.read(_write(tmp_path / "a.out", ts), 1 << 20)
    assert [b.dtype for b in back] == [dtype] * 4
    assert [tuple(b.shape) for b in back] == [(3, 5), (4,), (), (0, 4)]
    assert all(torch.equal(b, t) for b, t in zip(back, ts))


def test_outputs_read_refuses_what_a_candidate_could_forge(tmp_path):
    good = _write(tmp_path / "good.out", [torch.ones(4)])
    raw = good.read_bytes()

    def forged(name: str, data: bytes):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(outputs.OutputsUnreadable) as e:
            outputs.read(tmp_path / name, 10_000)
        return str(e.value)

    assert "not an outputs file" in forged("pickle.out", torch.save.__doc__.encode()[:200])
    assert "its header says" in forged("short.out", raw[:-8])  # cut short
    assert "its header says" in forged("long.out", raw + b"\0" * 64)
    raw16 = _write(tmp_path / "g16.out", [torch.ones(16)]).read_bytes()
    assert "its header says" in forged("shape.out", raw16.replace(b"[16]", b"[99]"))
    assert "bad entry" in forged("dtype.out", raw.replace(b'"float32"', b'"object!"'))
    assert "not JSON" in forged("json.out", raw.replace(b'"shape"', b'"shape\x00'))
    assert "header of" in forged("head.out", raw[:7] + (1 << 30).to_bytes(8, "little") + raw[15:])
    assert "far more than" in forged("huge.out", b"x" * 20_000)
    (tmp_path / "link.out").symlink_to(good)
    with pytest.raises(outputs.OutputsUnreadable, match="not a plain file"):
        outputs.read(tmp_path / "link.out", 10_000)
    with pytest.raises(outputs.OutputsUnreadable, match="was not written"):
        outputs.read(tmp_path / "none.out", 10_000)


def test_judge_file_and_info_from_diffs(tmp_path):
    refs = {f"correct_{i}": [torch.full((2,), float(i))] for i in range(3)}
    _write(tmp_path / "correct_0.out", [torch.full((2,), 0.0)])
    _write(tmp_path / "correct_1.out", [torch.full((2,), 1.5)])
    diffs = {lb: judge_file(tmp_path / f"{lb}.out", r, 1e-4, 1e-4) for lb, r in refs.items()}
    diffs = json.loads(json.dumps(diffs))  # they cross a process boundary as JSON
    info = info_from_diffs(["correct_0", "correct_1", "correct_2", "timing_3_ab"], diffs,
                           1e-4, 1e-4)
    assert (info.trials, info.passed) == (4, 1)
    assert info.failures[0].startswith("correct_1: 2/2 values beyond")
    assert info.failures[1] == "correct_2: correct_2.out was not written"
    assert info.failures[2] == "timing_3_ab: not compared"
    assert info.max_abs_diff == pytest.approx(0.5)


def test_output_tensors_exact_type():
    t = torch.ones(2)
    assert output_tensors(t) == [t] and len(output_tensors((t, t))) == 2
    for bad in (t.numpy(), [t, 1.0], torch.nn.Parameter(t)):
        with pytest.raises(OutputTypeError):
            output_tensors(bad)


def test_observe_aliasing_and_mutation():
    x = torch.ones(4)
    pristine = x.clone()
    _, seen = observe(x[1:], [x], [pristine])  # a view of the input
    assert seen == {"aliased": [0], "mutated": [], "devices": ["cpu"]}
    x.add_(1)
    _, seen = observe(torch.zeros(4), [x], [pristine])
    assert seen == {"aliased": [], "mutated": [0], "devices": ["cpu"]}


def test_judge_only_flags_what_reference_does_not_do():
    cand = {"correct_0": {"aliased": [0], "mutated": []}}
    assert [f.code for f in judge(cand, {"correct_0": {"aliased": [], "mutated": []}})] == [
        "output_aliases_input"]
    assert judge(cand, {"correct_0": {"aliased": [0], "mutated": []}}) == []
    moved = {"correct_0": {"aliased": [], "devices": ["cpu"]}}
    assert [f.code for f in judge(moved, {"correct_0": {"devices": ["cuda"]}})] == ["output_device"]


def test_trim_compiler_output_keeps_error_lines():
    log = "\n".join([f"[{i}/3] c++ -c main.cpp -I/usr/include/lots" for i in range(200)] +
                    ["main.cpp:3:25: error: expected primary-expression before ';' token",
                     "    3 |     return x * 2 + y +;", "ninja: build stopped"])
    trimmed = trim_compiler_output(log)
    assert "error: expected primary-expression" in trimmed
    assert len(trimmed.splitlines()) < 10


def test_cache_key_depends_on_source_and_toolchain():
    assert cache_key("a", "t1") != cache_key("b", "t1") != cache_key("a", "t2")
    assert cache_key("a", "t1") == cache_key("a", "t1")


def test_quick_check_and_needs_build():
    assert quick_check("class ModelNew: pass") is None
    assert "SyntaxError" in quick_check("class ModelNew(:")
    assert "no class ModelNew" in quick_check("x = 1")
    assert needs_build("from torch.utils.cpp_extension import load_inline")
    assert not needs_build("import torch\nclass ModelNew: pass")


@pytest.mark.parametrize("outcome,kind", [
    (ChildOutcome(status="crashed", exit_code=-11, signal_name="SIGSEGV"), "segfault"),
    (ChildOutcome(status="crashed", exit_code=-6, signal_name="SIGABRT"), "abort"),
    (ChildOutcome(status="timeout"), "timeout"),
    (ChildOutcome(status="oom"), "oom"),
    (ChildOutcome(status="no_result", exit_code=0), "exit"),
    (ChildOutcome(status="crashed", exit_code=3), "exit"),
    (ChildOutcome(status="error", error="SystemExit: 0"), "error"),
])
def test_crash_kinds(outcome, kind):
    assert crash_info("run", outcome).kind == kind


def test_find_candidates_names_and_manifest(tmp_path):
    (tmp_path / "level1_problem3_sample2.py").write_text("class ModelNew: pass")
    (tmp_path / "notes.py").write_text("")
    [c] = find_candidates([str(tmp_path)])
    assert (c.level, c.problem_id, c.sample) == (1, 3, 2)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"key": "bert/level2/7", "sample": 4,
                                     "path": "level1_problem3_sample2.py"}]))
    [m] = find_candidates([str(manifest)])
    assert (m.level, m.problem_id, m.sample) == (2, 7, 4)
    manifest.write_text(json.dumps([{"key": "nonsense", "path": "x.py"}]))
    with pytest.raises(UserError, match="entry 0"):
        find_candidates([str(manifest)])


def test_outputs_read_in_pieces_by_threads(tmp_path, monkeypatch):
    """A file of several read pieces comes back byte for byte (each thread reads its own
    piece at its own offset), and one cut short after its size was checked is refused."""
    monkeypatch.setattr(outputs, "READ_PIECE", 4096)
    monkeypatch.setattr(outputs, "READ_THREADS", 3)
    ts = [torch.randn(1000, 7), torch.arange(5000, dtype=torch.int64)]
    back = outputs.read(_write(tmp_path / "big.out", ts), 1 << 20)
    assert all(torch.equal(b, t) for b, t in zip(back, ts))
    staging = outputs.Staging()
    staging.bytes = lambda n: torch.empty(n, dtype=torch.uint8)  # no pinning on a CPU
    assert torch.equal(outputs.read(tmp_path / "big.out", 1 << 20, staging)[1], ts[1])

    real_fstat = os.fstat
    cut = tmp_path / "cut.out"
    cut.write_bytes((tmp_path / "big.out").read_bytes()[:-10_000])
    full_size = (tmp_path / "big.out").stat().st_size
    monkeypatch.setattr(outputs.os, "fstat", lambda fd: os.stat_result(
        (*real_fstat(fd)[:6], full_size, *real_fstat(fd)[7:])))  # the size it had when checked
    with pytest.raises(outputs.OutputsUnreadable, match="was cut short"):
        outputs.read(cut, 1 << 20)
