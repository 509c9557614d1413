"""The user-mistake walk: every command (run, eval, baseline, report, check) given the
mistakes a new user makes -- a file where a folder is expected, a place it cannot write,
missing files, unknown names, bad ranges, a missing $KB_EVAL_CONFIG, a --resume of a run
that does not exist, GPUs asked for on a machine without one -- answers with exactly one
line on stderr and exit code 2, never a traceback, and before any work.

Each case runs the real command in a subprocess from an empty folder (the repo's
config.py, no API keys); they run a few at a time, so the walk takes well under a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from candidates.eval_kit import tuned_config
from kb_eval.eval.schedule import nvcc_front, pch

REPO = Path(__file__).resolve().parents[1]
CANDIDATE = REPO / "tests" / "candidates" / "cpp" / "level1_problem1_sample1.py"
PROBLEMS = REPO / "tests" / "candidates" / "problems"
UNWRITABLE = "/proc/kb-eval-nope"  # even root cannot make a folder in /proc
NO_GPU = not torch.cuda.is_available()

CLIS = {"run": "kb_eval.run", "eval": "kb_eval.eval", "baseline": "kb_eval.baseline",
        "report": "kb_eval.report", "check": "kb_eval.check"}
EVAL = ["--candidates", str(CANDIDATE), "--source", str(PROBLEMS), "--backend", "cpp"]

# (command, arguments, what the one line must say[, the config's DEFAULTS]); {file} is a
# plain file, {runs} an empty folder. Without DEFAULTS: the repo's config.py (no
# arguments: a $KB_EVAL_CONFIG with no file).
CASES = [
    # a file where a folder is expected, a place that cannot be written
    ("run", ["--results-dir", "{file}"], "is a file, not a folder"),
    ("run", ["--results-dir", UNWRITABLE + "/r"], "cannot write"),
    ("run", ["--problems", "1"], "DEFAULTS.cache_dir {file}/c: {file} is a file, not a "
     "folder", {"cache_dir": "{file}/c"}),
    ("eval", [*EVAL, "--results-dir", "{file}"], "is a file, not a folder"),
    ("eval", [*EVAL, "--results-dir", UNWRITABLE], "cannot write"),
    ("baseline", ["--results-dir", "{file}"], "is a file, not a folder"),
    ("baseline", ["--output", "{file}/x.json"], "is a file, not a folder"),
    ("baseline", ["--output", UNWRITABLE + "/x.json"], "cannot write"),
    ("baseline", ["--output", "{runs}"], "is a folder"),
    ("report", ["--results-dir", "{file}"], "does not exist"),
    ("report", ["--results-dir", "{runs}", "--csv", "/nonexistent-dir/x.csv"],
     "cannot write /nonexistent-dir/x.csv"),
    ("report", ["--results-dir", "{runs}", "--html", "{file}/x.html"], "cannot write"),
    ("report", ["--results-dir", "{runs}", "--csv", "{runs}"], "it is a folder"),
    ("check", ["--harness", "--results-dir", "{file}"], "is a file, not a folder"),
    ("check", ["--harness", "--out", "{file}/x.json"], "is a file, not a folder"),
    # missing files and folders
    ("eval", ["--candidates", "/no/such/kernels", "--backend", "cpp"], "/no/such/kernels"),
    ("run", ["--source", "/no/such/problems"], "/no/such/problems"),
    ("baseline", ["--source", "/no/such/problems"], "/no/such/problems"),
    ("check", ["--source", "/no/such/problems"], "/no/such/problems"),
    ("report", ["--results-dir", "/nonexistent/results"], "does not exist"),
    # unknown names
    ("run", ["--model", "nosuch"], "nosuch"),
    ("run", ["--source", "nosuch"], "nosuch"),
    ("run", ["--backend", "fortran"], "invalid choice"),
    ("eval", [*EVAL, "--precision", "fp64"], "invalid choice"),
    ("baseline", ["--compile", "fastest"], "invalid choice"),
    ("report", ["--results-dir", "{runs}", "--precision", "fp64"], "unknown --precision"),
    ("report", ["--results-dir", "{runs}", "--model", "nosuch"], "unknown --model 'nosuch'"),
    ("report", ["--bogus-flag"], "unrecognized arguments"),
    # bad ranges and numbers
    ("run", ["--level", "9"], "level 9 not in"),
    ("run", ["--level", "0"], "bad level"),
    ("run", ["--problems", "5-2"], "5-2"),
    ("run", ["--problems", "999"], "999"),
    ("run", ["--samples", "0"], "--samples must be at least 1"),
    ("run", ["--atol", "-1"], "--atol must be at least 0"),
    ("eval", [*EVAL, "--level", "7"], "level 7 not in"),
    ("eval", [*EVAL, "--rtol", "-0.5"], "--rtol must be at least 0"),
    ("baseline", ["--problems", "3-1"], "3-1"),
    ("baseline", ["--trials", "0"], "--trials must be at least 1"),
    ("check", ["--level", "9"], "level 9 not in"),
    ("check", ["--seeds", "1"], "--seeds must be at least 2"),
    # settings that are the config's DEFAULTS, not flags, and wrong values there
    ("run", ["--lane-depth", "2"], "unrecognized arguments: --lane-depth"),
    ("run", ["--warmup", "1"], "unrecognized arguments: --warmup 1"),
    ("eval", [*EVAL, "--cache-dir", "c"], "unrecognized arguments: --cache-dir c"),
    ("eval", [*EVAL, "--executor", "ray"], "unrecognized arguments: --executor ray"),
    ("check", ["--harness", "--correct-trials", "2"], "unrecognized arguments"),
    ("baseline", ["--compile", "tvm", "--tvm-no-arch"], "unrecognized arguments"),
    ("eval", EVAL, "DEFAULTS.correct_trials: Input should be greater than or equal to 1",
     {"correct_trials": 0}),
    ("baseline", ["--problems", "1"], "DEFAULTS.warmup", {"warmup": -1}),
    ("eval", [*EVAL, "--ray-address", " "], "--ray-address: give the head's host:port"),
    # settings that must not be ignored
    ("run", ["--resume", "--run", "nosuch"], "nothing to resume"),
    ("run", ["--resume"], "no run under"),
    ("eval", [*EVAL, "--resume", "--run", "nosuch"], "nothing to resume"),
    ("eval", [*EVAL, "--problems", "2"], "no candidate for --problems 2"),
    ("eval", [*EVAL, "--baseline-compile", "max-autotune", "--results-dir", "{runs}"],
     "_compile-max-autotune.json is missing"),
    *[(cli, [], "KB_EVAL_CONFIG") for cli in CLIS],
    *([("run", ["--gpus", "0"], "no GPU visible"),
       ("eval", [*EVAL, "--gpus", "0"], "no GPU visible"),
       ("baseline", ["--gpus", "0"], "no GPU visible"),
       ("check", ["--gpus", "0"], "no GPU visible")] if NO_GPU else []),
]


def _env(config: str | None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k != "KB_EVAL_CONFIG" and not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if config is not None:
        env["KB_EVAL_CONFIG"] = config
    return env


def _run(cli: str, args: list[str], cwd: Path, config: str | None, **env):
    # A guard against a hang, not a pace: a cold C++ build on a busy 2-core machine took
    # more than 180 s here.
    return subprocess.run([sys.executable, "-m", CLIS[cli], *args], cwd=cwd,
                          env={**_env(config), **env}, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """Every case, run a few at a time: (case, its working folder, completed process)."""
    root = tmp_path_factory.mktemp("mistakes")
    (root / "afile").write_text("not a folder\n")
    (root / "runs").mkdir()
    subst = {"{file}": str(root / "afile"), "{runs}": str(root / "runs")}

    def fill(text):
        return text.replace("{file}", subst["{file}"]).replace("{runs}", subst["{runs}"])

    def one(case):
        cli, args, expected, *defaults = case
        i = CASES.index(case)
        cwd = root / f"cwd-{i}"
        cwd.mkdir()
        args = [fill(a) for a in args]
        config = str(root / "no-config.py") if not args else None
        if defaults:  # beside the working folder: nothing may be written in it
            values = {k: fill(v) if isinstance(v, str) else v for k, v in defaults[0].items()}
            config = tuned_config(root / f"config-{i}", **values)["KB_EVAL_CONFIG"]
        return (cli, args, fill(expected), *defaults), cwd, _run(cli, args, cwd, config)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, CASES))


@pytest.mark.parametrize("i", range(len(CASES)),
                         ids=[f"{c[0]} {' '.join(c[1])[:60] or 'KB_EVAL_CONFIG'}"
                              for c in CASES])
def test_mistake_is_one_line_and_exit_2(walk, i):
    (cli, args, expected, *_), cwd, done = walk[i]
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and expected in err[0], err[0]
    # Before any work: no result or baseline file written, nothing built (the compiler
    # fronts' scripts and smaller headers may be installed by an eval that got as far as
    # its baseline; a precompiled header would be work).
    written = [p for p in cwd.rglob("*") if p.is_file() and p.parent.name != "bin"
               and not _front_header(p)]
    assert not written, written


def _front_header(path: Path) -> bool:
    """A smaller torch header a compiler front installs (pch.py's slim, nvcc_front.py's
    lean and slim): <front>/<tier>/torch/<name>.h."""
    return (path.suffix == ".h" and path.parent.name == "torch"
            and path.parent.parent.name in {pch.SLIM_FOLDER, *nvcc_front.TIERS})


def test_walk_covers_every_command():
    assert {c[0] for c in CASES} == set(CLIS)


def test_tuning_defaults_match_the_eval_config():
    """The config's DEFAULTS carry the knobs that have no flag; their defaults must be the
    EvalConfig's and TimingSettings' own (kb_eval.settings does not import torch)."""
    from kb_eval.eval.config import EvalConfig
    from kb_eval.settings import Defaults
    from kb_eval.timing import TimingSettings

    d = Defaults()
    assert EvalConfig.model_fields["recheck_timed"].default == d.recheck_timed
    assert EvalConfig.model_fields["cpu_lanes"].default == d.cpu_lanes
    assert TimingSettings.model_fields["budget_ms"].default == d.timing_budget_ms
    assert EvalConfig.model_fields["count_launches"].default == d.count_launches


# ------------------------------------------------------------------ --help and shared flags
def test_every_help_answers_and_run_has_evals_checking_flags(tmp_path):
    """`--help` of every command exits 0; run and eval share the checking flags (run used
    to lack them) and the baseline choice."""
    shared = ("--atol", "--rtol", "--keep-workdirs", "--quiet",
              "--live-baseline", "--baseline-compile")
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(CLIS, pool.map(lambda c: _run(c, ["--help"], tmp_path, None), CLIS)))
    for cli, done in helps.items():
        assert done.returncode == 0 and "usage:" in done.stdout, (cli, done.stderr)
    for cli in ("run", "eval"):
        missing = [f for f in shared if f not in helps[cli].stdout]
        assert not missing, (cli, missing)
    assert "--full-suite" in helps["run"].stdout and "--quiet" in helps["baseline"].stdout


def test_level_takes_several_levels():
    from kb_eval.cli import Parser, add_selection_flags
    from kb_eval.problems import load_problems

    p = Parser(prog="x")
    add_selection_flags(p, "bert")
    assert p.parse_args(["--level", "3", "1"]).level == [1, 3]
    assert p.parse_args(["--level", "1,3", "3"]).level == [1, 3]
    assert p.parse_args([]).level is None
    assert {q.level for q in load_problems("bert", [1, 3])} == {1, 3}
    assert {q.level for q in load_problems("bert", 2)} == {2}  # one level, the old form


# ------------------------------------------------------------------ the files written
def test_result_files_get_the_usual_mode(tmp_path):
    """write_json_atomic's temp file is 0600; the result must be what open() makes."""
    from kb_eval.results import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


def test_baseline_file_per_source_and_invocations_kept():
    from kb_eval.results import Producer, baseline_path

    ops = baseline_path(Path("results"), "cpu", "fp32", source="ops")
    bert = baseline_path(Path("results"), "cpu", "fp32", "compile-default", source="bert")
    assert ops == Path("results/baseline/cpu/ops/fp32.json")
    assert bert == Path("results/baseline/cpu/bert/fp32_compile-default.json")
    assert str(ops) in (REPO / "results" / "README.md").read_text()  # the doc's example
    first = Producer(tool="t", argv=["a", "--x"]).continuing(None)
    third = Producer(tool="t", argv=["c"]).continuing(
        Producer(tool="t", argv=["b"]).continuing(first))
    assert third.invocations == [["a", "--x"], ["b"], ["c"]] and third.argv == ["c"]
    # A file written before `invocations` existed: its argv is its one invocation.
    assert Producer(tool="t", argv=["z"]).continuing(
        Producer(tool="t", argv=["y"])).invocations == [["y"], ["z"]]


def test_cpu_named_and_cpu_timings_not_called_cuda_events():
    from kb_eval.results import HardwareInfo, cpu_model
    from kb_eval.timing import method_for

    name = cpu_model()
    assert name and not name.isdigit()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "model name" in cpuinfo.read_text():
        assert name in cpuinfo.read_text()
    hw = HardwareInfo.detect("cpu")
    assert hw.cpu == name and hw.name == name
    assert method_for("cpu") == "perf_counter"
    assert method_for("cuda") == "cuda_events+l2flush+cover+devwait"
    assert method_for("cuda", flush_l2=False) == "cuda_events+cover+devwait"
    # timed without the launch cover: not to be mixed with timings taken with it
    assert method_for("cuda", cover_ms=0) == "cuda_events+l2flush+devwait"


def test_correctness_trials_explained():
    """trials = correctness trials + shape probes + re-checked timed calls, each counted."""
    from kb_eval.eval.judge.correctness import info_from_diffs

    labels = [f"correct_{i}" for i in range(5)] + ["shape_0"] + \
        [f"timing_{i}_{i + 10:x}" for i in range(5)]
    info = info_from_diffs(labels, {lb: {"ok": True} for lb in labels}, 1e-4, 1e-4)
    assert (info.trials, info.correct_trials, info.shape_probes, info.rechecked_timed) == \
        (11, 5, 1, 5)


def test_samples_sorted_and_summary_per_level():
    from kb_eval.eval.judge.score import summarize_levels
    from kb_eval.report import summary_table
    from kb_eval.results import RunFile, SampleRecord, HardwareInfo, Producer, sample_order
    from kb_eval.timing import TimingSettings

    recs = [SampleRecord(key=f"s/level{lv}/{pid}", level=lv, problem_id=pid, sample=s,
                         turn=t, status="correct", compiled=True, correct=True,
                         speedup=2.0 if lv == 1 else 0.5)
            for lv, pid, s, t in [(2, 1, 0, 0), (1, 10, 0, 0), (1, 2, 1, 0), (1, 2, 0, 1),
                                  (1, 2, 0, 0)]]
    ordered = sorted(recs, key=sample_order)
    assert [(r.level, r.problem_id, r.sample, r.turn) for r in ordered] == \
        [(1, 2, 0, 0), (1, 2, 0, 1), (1, 2, 1, 0), (1, 10, 0, 0), (2, 1, 0, 0)]
    asked = ["s/level1/2", "s/level1/10", "s/level2/1"]
    s = summarize_levels(recs, asked, samples_per_problem=2)
    assert set(s.levels) == {"level1", "level2"}
    assert s.levels["level1"].problems == 2 and s.levels["level1"].fast_p["fast_1"] > 0
    assert s.levels["level2"].fast_p["fast_1"] == 0.0
    run = RunFile(produced_by=Producer(tool="t"), precision="fp32", timing=TimingSettings(),
                  hardware=HardwareInfo(device="cpu", name="c", slug="cpu", torch_version="x"),
                  samples=ordered, problems_asked=asked, summary=s)
    table = summary_table(run)
    assert "level1 (2 problems)" in table and "level2 (1 problems)" in table
    assert "nan" not in table.lower() and "None" not in table


# ------------------------------------------------------------------ mistakes met later on
def _progress_line(line: str) -> bool:
    """A tqdm progress line (`  0%|   | 0/1 [...]`), which stderr may hold besides the error."""
    return "%|" in line


def _one_error_line(done) -> str:
    """The one line on stderr that is not the progress bar; no traceback, no retry."""
    err = [ln for ln in done.stderr.splitlines() if ln.strip() and not _progress_line(ln)]
    assert "Traceback" not in done.stderr and "retry" not in done.stderr, done.stderr[-2000:]
    assert len(err) == 1, err
    return err[0]


def test_unreachable_model_server_stops_the_run(tmp_path):
    """No server at the model's address (a port bound but never listening, so that every
    connect is refused): the run stops at its first requests with one line and exit 2,
    rather than retrying and recording a 0 % run."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        config = tmp_path / "config.py"
        config.write_text(f"MODELS = [dict(name='gone', base_url={url!r}, model='m', "
                          f"api_key_env=None, max_concurrency=4, timeout_s=30)]\n"
                          f"DEFAULTS = dict(source={str(PROBLEMS)!r}, backend='cpp', "
                          f"results_dir={str(tmp_path / 'results')!r})\n")
        done = _run("run", ["--model", "gone", "--problems", "1-2", "--live-baseline"],
                    tmp_path, str(config))
    assert done.returncode == 2, done.stderr[-2000:]
    line = _one_error_line(done)
    assert line.startswith("error: gone: cannot reach " + url) and "refused" in line, line
    samples = [s for f in (tmp_path / "results").glob("gone/*/results.json")
               for s in json.loads(f.read_text())["samples"]]
    assert not samples, samples  # nothing recorded: nothing to rank as a 0 % run


SCALE_ADD = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return 2 * x + y
"""


def test_eval_warns_of_skipped_files_and_keeps_to_the_selection(tmp_path):
    """Misnamed files next to valid ones, and a candidate outside --problems: one warning
    line each, and only the selected candidate is evaluated (the other is not built)."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "level1_problem1_sample0.py").write_text(SCALE_ADD)
    (kernels / "level1_problem2_sample0.py").write_text("this would not even parse (\n")
    for name in ("relu_candidate.py", "level1_problem15.py"):
        (kernels / name).write_text(SCALE_ADD)
    config = tuned_config(tmp_path / "config", warmup=1, correct_trials=2)
    done = _run("eval", ["--candidates", str(kernels), "--source", str(PROBLEMS),
                         "--backend", "cpp", "--problems", "1", "--live-baseline",
                         "--trials", "2", "--results-dir", str(tmp_path / "results"),
                         "--run", "w"], tmp_path, config["KB_EVAL_CONFIG"])
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 2, done.stderr
    assert "2 file(s) not named" in warnings[0] and "relu_candidate.py" in warnings[0] \
        and "level1_problem15.py" in warnings[0], warnings[0]
    assert warnings[1] == ("warning: skipped 1 candidate(s) outside --problems 1: "
                           "level1_problem2_sample0.py"), warnings[1]
    results = json.loads((tmp_path / "results" / "kernels" / "w" / "results.json").read_text())
    assert [s["problem_id"] for s in results["samples"]] == [1]
    assert results["problems_asked"] == [results["samples"][0]["key"]]


@pytest.mark.parametrize("cli", ["run", "eval"])
def test_hf_source_without_the_hub_is_one_line_at_once(tmp_path, cli):
    """--source hf where the hub cannot be reached (HF_ENDPOINT at a port that refuses,
    so no test reaches the internet) and nothing is cached: one line and exit 2, with no
    retry messages from `datasets` before it."""
    import socket

    args = {"run": ["--source", "hf", "--level", "1", "--problems", "1"],
            "eval": [*EVAL[:2], "--source", "hf", "--backend", "cpp"]}[cli]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        done = _run(cli, args, tmp_path, None, HF_HOME=str(tmp_path / "hf"),
                    HF_ENDPOINT=f"http://127.0.0.1:{sock.getsockname()[1]}")
    assert done.returncode == 2, done.stderr[-2000:]
    line = _one_error_line(done)
    assert "cannot load dataset 'ScalingIntelligence/KernelBench'" in line \
        and "cannot be reached and no copy is cached" in line, line
