"""The Python API on CPU: streaming from a queue, the build cache (no compiler on a hit),
and speedups from a baseline file."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from candidates import eval_kit as kit
from kb_eval.errors import UserError
from kb_eval.eval import EvalConfig, evaluate, iter_queue, prepare
from kb_eval.problems import load_problems
from kb_eval.results import (BaselineFile, BaselineRecord, HardwareInfo, Producer,
                             baseline_path, write_json_atomic)
from kb_eval.timing import TIMED_PROCESS_ENV, TimingSettings, TimingStats, method_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def problems():
    return {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}


@pytest.fixture
def config(tmp_path, build_cache_dir):
    """EvalConfig factory: cpp, live baseline, 3 timed calls, the session build cache."""
    return lambda **kw: make_config(tmp_path, build_cache_dir, **kw)


def make_config(tmp_path, build_cache_dir, **kw) -> EvalConfig:
    return EvalConfig(backend="cpp", live_baseline=kw.pop("live_baseline", True),
                      timing=TimingSettings(warmup=1, trials=3), jobs=2,
                      cache_dir=build_cache_dir, results_dir=tmp_path / "results",
                      run_timeout_s=kw.pop("run_timeout_s", 60),
                      extra_env={"PATH": kit.wrapper_path()}, **kw)


def test_streams_pairs_as_they_arrive(problems, config):
    """The second pair is only produced after the first one's record came out."""
    q: queue.Queue = queue.Queue()
    first_seen = threading.Event()
    producer_ok = []

    def produce():
        q.put((problems[2], 0, kit.source_of(kit.CPP / "level1_problem2_sample0.py")))
        producer_ok.append(first_seen.wait(timeout=300))
        q.put((problems[1], 1, kit.source_of(kit.CPP / "level1_problem1_sample1.py"), 2))
        q.put(None)

    threading.Thread(target=produce, daemon=True).start()
    records = []
    for record in evaluate(iter_queue(q), config()):
        records.append(record)
        first_seen.set()
    assert producer_ok == [True]
    assert [(r.key.split("/")[-1], r.sample, r.turn, r.status) for r in records] == [
        ("2", 0, 0, "correct"), ("1", 1, 2, "incorrect")]
    # the problem's work and the correct sample's speed of light, the machine's peaks
    # measured on first need beside the baseline files (kb_eval/peaks.py)
    work, sol = records[0].work, records[0].sol
    assert work.bytes > 0 and work.bytes == work.in_bytes + work.weight_bytes + work.out_bytes
    assert sol.byte_share > 0 and sol.share == max(sol.flop_share or 0, sol.byte_share)
    assert sol.reference_share > 0 and records[1].sol is None and records[1].work is not None
    assert (config().results_dir / "baseline" / "cpu" / "peaks.json").exists()


def test_the_devices_children_start_before_any_sample_comes(config):
    """A run's candidate children start up (torch, and CUDA on a GPU) while its first
    builds and memory plans go on: on the H100 each of a check --harness run's first
    samples waited ~6 s for them after its plan. Looked for while the run is live: its
    spares bind its scratch folders, which are gone (and the spares stale) after it."""
    from kb_eval.eval.schedule.sample import CHILD_TARGET
    from kb_eval.isolation.spares import SPARES

    ctx = prepare(config())
    SPARES.close()  # none left by other tests
    waiting = []

    def no_samples():
        waiting.extend(SPARES.take(ctx.device_env(d), CHILD_TARGET.partition(":")[0])
                       for d in ctx.devices)
        yield from ()

    try:
        assert list(evaluate(no_samples(), context=ctx)) == []  # not one sample
        assert waiting and all(child is not None for child in waiting), ctx.devices
    finally:
        for child in waiting:
            if child is not None:
                child.kill_all()
        SPARES.close()


def test_cache_hit_runs_no_compiler(problems, config):
    source = kit.source_of(kit.CPP / "level1_problem1_sample0.py")
    # unsandboxed: the logging compiler wrapper appends to a file outside the build's
    # sandbox (which a sandboxed build could not write: test_sandbox covers the cache)
    cfg = config(sandbox=False)
    [first] = list(evaluate([(problems[1], 0, source)], cfg))
    assert first.status == "correct", first
    build_dir = cfg.cache_dir / "builds" / first.build.cache_key
    ninja_log = next(build_dir.rglob(".ninja_log"))
    so = next(build_dir.rglob("*.so"))
    if not first.build.cache_hit:  # compiled just now, through the logging wrapper
        assert any("kb_test_scale_add" in line for line in kit.compile_lines())
    before = (kit.compile_lines(), ninja_log.read_text(), ninja_log.stat().st_mtime_ns,
              so.stat().st_mtime_ns)

    [again] = list(evaluate([(problems[1], 5, source)], cfg))
    assert again.status == "correct" and again.build.cache_hit
    assert again.build.cache_key == first.build.cache_key
    after = (kit.compile_lines(), ninja_log.read_text(), ninja_log.stat().st_mtime_ns,
             so.stat().st_mtime_ns)
    assert after == before


def test_cached_compile_error_served_from_cache(problems, config):
    source = kit.source_of(kit.CPP / "level1_problem1_sample3.py")
    records = [list(evaluate([(problems[1], 3, source)], config()))[0] for _ in range(2)]
    assert [r.status for r in records] == ["compile_error"] * 2
    assert records[1].build.cache_hit and records[1].error == records[0].error


def _write_baseline(cfg: EvalConfig, problem, ms: float, method: str | None = None,
                    mode: str = "eager"):
    # As `python -m kb_eval.baseline` writes it on this CPU (perf_counter, not CUDA events).
    timing = cfg.timing.model_copy(update={"method": method or method_for("cpu")})
    hw = HardwareInfo.detect("cpu")
    rec = BaselineRecord(key=problem.key, source=problem.source, level=problem.level,
                         problem_id=problem.problem_id, name=problem.name, status="ok",
                         timing=TimingStats.of([ms, ms, ms]))
    path = baseline_path(cfg.results_dir, hw.slug, cfg.precision, mode, source=problem.source)
    write_json_atomic(path, BaselineFile(produced_by=Producer(tool="test"), hardware=hw,
                                         precision=cfg.precision, timing=timing,
                                         records={problem.key: rec}))
    return path


def test_speedup_from_baseline_file(problems, config):
    cfg = config(live_baseline=False)
    _write_baseline(cfg, problems[2], ms=1000.0)
    ctx = prepare(cfg)
    with pytest.raises(UserError, match="no timing for"):
        ctx.check_baseline_covers([problems[1]])
    [r] = list(evaluate([(problems[2], 0, kit.source_of(kit.CPP / "level1_problem2_sample0.py"))],
                        context=ctx))
    assert r.status == "correct"
    # the file's time is the secondary figure; an inflated file (1 s) cannot move the
    # headline, which is the rounds timed in pairs with the candidate
    assert r.speedup_vs_baseline == pytest.approx(1000.0 / r.timing.median)
    assert r.speedup_ci_method == "paired_rounds" and r.baseline_source == "live"
    assert r.baseline.median < 100 and r.speedup < 0.1 * r.speedup_vs_baseline
    lo, hi = r.speedup_ci  # the point and its interval from the same rounds
    assert lo <= r.speedup <= hi


def test_baseline_with_other_timing_method_refused(problems, config):
    cfg = config(live_baseline=False)
    _write_baseline(cfg, problems[2], ms=1.0, method="wallclock")
    with pytest.raises(UserError, match="refusing to mix"):
        prepare(cfg).check_baseline_covers([problems[2]])


def test_compile_baseline_file_is_the_one_used(problems, config):
    """--baseline-compile MODE: the file of `baseline --compile MODE`, never the eager one;
    the context names its clock (perf_counter on the CPU, as the file)."""
    cfg = config(live_baseline=False, baseline_mode="compile-max-autotune")
    _write_baseline(cfg, problems[2], ms=7.0)  # eager only: not the one asked for
    with pytest.raises(UserError, match="_compile-max-autotune.json is missing"):
        prepare(cfg).check_baseline_covers([problems[2]])
    path = _write_baseline(cfg, problems[2], ms=3.0, mode="compile-max-autotune")
    ctx = prepare(cfg)
    ctx.check_baseline_covers([problems[2]])
    assert ctx.baseline_file == path and ctx.baseline_for(problems[2]).median == 3.0
    assert ctx.config.timing.method == "perf_counter"


def test_recheck_of_timed_calls(problems, config):
    """Outputs of K randomly chosen timed calls are compared too."""
    cfg = config(recheck_timed=2)
    [r] = list(evaluate([(problems[2], 0, kit.source_of(kit.CPP / "level1_problem2_sample0.py"))],
                        cfg))
    assert r.status == "correct"
    assert r.correctness.trials == cfg.correct_trials + 2 == r.correctness.passed


def test_failing_producer_abandons_run_quickly(problems, config):
    """The producer raises while a hanging candidate runs: the error reaches the consumer,
    and the hanging child is killed instead of being waited for (run timeout: 300 s)."""
    def pairs():
        yield (problems[1], 6, kit.source_of(kit.CPP / "level1_problem1_sample6.py"))
        time.sleep(8)
        raise RuntimeError("inference fell over")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="inference fell over"):
        list(evaluate(pairs(), config(run_timeout_s=300)))
    assert time.monotonic() - t0 < 60


def test_vandal_finds_no_reference_to_change(problems, config):
    """honest -> vandal (zeroes every reference output file it finds) -> all-zeros ->
    honest, one at a time: reference outputs never touch the disk, so the vandal changes
    nothing and every sample is judged on true references."""
    q: queue.Queue = queue.Queue()
    got: queue.Queue = queue.Queue()
    order = [(0, kit.CPP / "level1_problem1_sample0.py"), (1, kit.VANDAL / "overwrite_refs.py"),
             (2, kit.VANDAL / "zeros.py"), (3, kit.CPP / "level1_problem1_sample0.py")]

    def produce():
        for sample, path in order:  # the next one only once the previous one is recorded
            q.put((problems[1], sample, kit.source_of(path)))
            got.get(timeout=300)
        q.put(None)

    threading.Thread(target=produce, daemon=True).start()
    records = {}
    for r in evaluate(iter_queue(q), config()):
        records[r.sample] = r
        got.put(r.sample)
    assert records[0].status == "correct" and records[3].status == "correct", records[3]
    assert records[1].status == "correct", records[1]  # (flagged only as PyTorch-only)
    assert [f.code for f in records[1].flags] == ["no_custom_kernel"], records[1].flags
    assert records[2].status == "incorrect"


def test_launch_counts_asked_for_or_not(problems, config):
    """Launch counts are on by default for the cpp backend (the CPU profiler is cheap),
    off on a GPU (CUPTI's start costs seconds per candidate process) unless asked, and
    `count_launches=False` leaves a correct record without them. The processes that time
    tear CUPTI down after a profiled call (an attached CUPTI slows every later launch)."""
    assert EvalConfig().counts_launches("cpu") and not EvalConfig().counts_launches("cuda")
    assert EvalConfig(count_launches=True).counts_launches("cuda")
    assert not EvalConfig(count_launches=False).counts_launches("cpu")
    assert TIMED_PROCESS_ENV["TEARDOWN_CUPTI"] == "1"
    source = kit.source_of(kit.CPP / "level1_problem2_sample0.py")
    [off] = evaluate([(problems[2], 0, source)], config(count_launches=False))
    assert off.status == "correct" and off.launches is None
    [on] = evaluate([(problems[2], 0, source)], config())
    assert on.status == "correct" and on.launches is not None and on.launches.candidate >= 1
