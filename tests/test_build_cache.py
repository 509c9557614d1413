"""The build cache and the precompiled torch/extension.h survive kills, races and damage:
a half-made PCH is never used, two first builds do not trip over each other, a failure of
ours is neither cached nor blamed on the candidate, a real compile error is both.

Real compiler, real children, the cpp backend. A PCH costs ~45 s to make here, so tests
start from a copy (hard links) of one made by the module's first build where they can."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.schedule import pch
from kb_eval.eval.child.build_task import compile_error_line, is_diagnosed, toolchain_fault
from kb_eval.eval.schedule.build import MARKER, Builder, cache_key, toolchain_fingerprint
from kb_eval.problems import load_problems, reference_copy
from kb_eval.timing import TimingSettings

slow = pytest.mark.slow  # every test that compiles

# Candidates for problem 1 (out = 2x + y) written as models write them: the C++ source
# includes torch/extension.h itself, so main.cpp includes it twice (GCC then looks for
# the header beside the .gch: the bug that made every such build fail).
CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    auto xc = x.contiguous(), yc = y.contiguous();
    auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    const float* b = yc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = BODY;
    return out;
}
"""

ext = load_inline("NAME", cpp_sources=SOURCE, functions=["scale_add"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.scale_add(x, y)
'''
GOOD_A = CANDIDATE.replace("NAME", "kb_cache_a").replace("BODY", "2.0f * a[i] + b[i]")
GOOD_B = CANDIDATE.replace("NAME", "kb_cache_b").replace("BODY", "a[i] + a[i] + b[i]")
BROKEN = CANDIDATE.replace("NAME", "kb_cache_broken").replace("BODY", "2.0f * a[i] +")


@pytest.fixture(scope="module")
def problem():
    return {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}[1]


def config(cache: Path, tmp: Path) -> EvalConfig:
    """cpp, live baseline, 2 build jobs (the default on this machine's 2 cores)."""
    return EvalConfig(backend="cpp", live_baseline=True, jobs=2, cache_dir=cache,
                      results_dir=tmp / "results", run_timeout_s=120,
                      timing=TimingSettings(warmup=1, trials=3))


def judge(problem, cache: Path, tmp: Path, *sources: str) -> list:
    """Evaluate each source as a sample of problem 1; records in sample order."""
    pairs = [(problem, i, s) for i, s in enumerate(sources)]
    return sorted(evaluate(pairs, config(cache, tmp)), key=lambda r: r.sample)


def assert_correct(records) -> None:
    for r in records:
        assert (r.status, r.build.status) == ("correct", "ok"), (r.error, r.detail)


def pch_folders(cache: Path) -> list[Path]:
    """The PCH folders made under a cache (not bin/, locks, temporaries)."""
    root = cache / "pch"
    return [p for p in root.iterdir() if re.fullmatch(r"[0-9a-f]{24}", p.name)]


def builder(cache: Path, timeout_s: float = 600, full_only: bool = False) -> Builder:
    """A Builder with the PCH front, as an eval of the cpp backend sets it up
    (`full_only`: without the slim tier)."""
    env = {**pch.install(cache / "pch", "c++"), **({pch.SLIM_VAR: "0"} if full_only else {})}
    return Builder(cache / "builds", toolchain_fingerprint("", front=env["CXX"]), env,
                   timeout_s=timeout_s, mem_limit_mb=None)


# ------------------------------------------------------------------ whose fault
# Failures of ours, one line each as GCC, its driver, sh and ninja print them.
OURS = ["main.cpp:1: fatal error: cannot read PCH file: No such file or directory",
        "main.cpp:3:10: fatal error: /c/pch/cbdd2af3bb60cccedadeb68b/torch/extension.h: No "
        "such file or directory",
        "/bin/sh: 1: /c/pch/bin/kb-pch-g++: not found",
        "c++: fatal error: Killed signal terminated program cc1plus",
        "ninja: build stopped: interrupted by user."]


@pytest.mark.parametrize("line", OURS)
def test_our_failures_are_told_apart(line):
    text = f"RuntimeError: Error building extension 'x': [1/2] c++ -c main.cpp\n{line}\n"
    assert line in toolchain_fault(text, ["/c/pch", "/c/builds"])


def test_candidate_errors_are_its_own():
    text = ("RuntimeError: Error building extension 'x': [1/2] /c/pch/bin/kb-pch-g++ -c "
            "/c/builds/k/x/main.cpp -o main.o\nFAILED: main.o\n/c/builds/k/x/main.cpp:9:70:"
            " error: expected primary-expression before ';' token\n")
    assert toolchain_fault(text, ["/c/pch", "/c/builds"]) is None and is_diagnosed(text)
    assert not is_diagnosed("RuntimeError: Error building extension 'x': FAILED: main.o")
    assert compile_error_line(text) == "main.cpp:9:70: error: expected primary-expression " \
                                       "before ';' token"
    # no diagnostic: the exception's first line, as before
    assert compile_error_line("RuntimeError: Error building extension 'x'\nninja: x") == \
        "RuntimeError: Error building extension 'x'"


# ------------------------------------------------------------------ a race
@pytest.fixture(scope="module")
def made(tmp_path_factory, problem):
    """Two first builds on a fresh cache with 2 jobs (one worker makes the PCH from a
    source of ours first, pch_warm.py, while the other compiles); the PCH folder left is
    the one later tests copy."""
    tmp = tmp_path_factory.mktemp("made")
    cache = tmp / "cache"
    records = judge(problem, cache, tmp, GOOD_A, GOOD_B)
    folders = pch_folders(cache)
    return {"records": records, "folders": folders, "folder": folders[0] if folders else None,
            "ninja": next((cache / "builds").rglob("build.ninja"), None)}


@slow
def test_two_first_builds_race_on_fresh_cache(made):
    assert_correct(made["records"])
    assert [r.build.cache_hit for r in made["records"]] == [False, False]
    [folder] = made["folders"]
    assert pch.is_complete(folder)


def folder_is_slim(folder: Path) -> bool:
    """A PCH folder of the slim tier's header (else torch's)."""
    return (folder / pch.HEADER).read_text() == pch.SLIM


def clone_pch(made: dict, cache: Path) -> Path:
    """The made PCH folder in another cache, as hard links (replace files, never edit
    them in place: that would damage the original)."""
    assert made["folder"] is not None, "the first builds made no PCH"
    folder = cache / "pch" / made["folder"].name
    shutil.copytree(made["folder"], folder, copy_function=os.link)
    return folder


def replace_with_prefix(path: Path, fraction: float) -> None:
    """A truncated copy of `path` in its place (as a killed writer leaves it)."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[:int(len(data) * fraction)])


def truncate_and_forge(folder: Path) -> None:
    """A truncated .gch that our checks pass: its marker says the truncated size."""
    replace_with_prefix(folder / pch.GCH, 0.5)
    marker = json.loads((folder / pch.COMPLETE).read_text())
    (folder / pch.COMPLETE).unlink()
    marker["gch_size"] = (folder / pch.GCH).stat().st_size
    (folder / pch.COMPLETE).write_text(json.dumps(marker))


# ------------------------------------------------------------------ half-made PCH
@slow
def test_gch_without_header_is_remade(made, problem, tmp_path):
    """What an older version left when killed: the .gch, no header, no marker."""
    cache = tmp_path / "cache"
    folder = clone_pch(made, cache)
    (folder / pch.HEADER).unlink()
    (folder / pch.COMPLETE).unlink()

    assert_correct(judge(problem, cache, tmp_path, GOOD_A))
    assert pch_folders(cache) == [folder] and pch.is_complete(folder)
    assert (folder / pch.HEADER).is_file()


@slow
def test_truncated_gch_is_not_used_while_another_remakes_it(made, problem, tmp_path):
    """A truncated .gch and no marker, and another compile holds the lock (it is
    remaking it): this build goes on without the PCH and is right."""
    cache = tmp_path / "cache"
    folder = clone_pch(made, cache)
    replace_with_prefix(folder / pch.GCH, 0.5)
    (folder / pch.COMPLETE).unlink()
    with open(cache / "pch" / f"{folder.name}.lock", "a") as lock:
        pch.fcntl.flock(lock, pch.fcntl.LOCK_EX)
        assert_correct(judge(problem, cache, tmp_path, GOOD_A))
    assert not pch.is_complete(folder)  # untouched: nobody made it, nobody used it


# ------------------------------------------------------------------ a kill
def compile_args(ninja: Path, source: Path) -> list[str]:
    """The compile that ninja runs for main.cpp, for another source."""
    text = ninja.read_text()
    var = {m[1]: m[2] for m in re.finditer(r"^(\w+) = (.*)$", text, re.M)}
    return ["-MMD", "-MF", f"{source}.d", *shlex.split(var["cflags"]), "-c", str(source),
            "-o", f"{source}.o", *shlex.split(var.get("post_cflags", ""))]


@slow
def test_run_killed_while_making_pch_then_rerun(made, problem, tmp_path):
    """SIGKILL the front (and its compiler) while it makes the first PCH, then run again:
    every candidate builds and is judged correct."""
    cache = tmp_path / "cache"
    env = {**os.environ, **pch.install(cache / "pch", "c++")}
    main_cpp = tmp_path / "main.cpp"
    main_cpp.write_text("#include <torch/extension.h>\nint f() { return 1; }\n")
    front = subprocess.Popen([sys.executable, pch.__file__,
                              *compile_args(made["ninja"], main_cpp)],
                             env=env, start_new_session=True, stderr=subprocess.PIPE)
    making = cache / "pch" / f"{made['folder'].name}.tmp.{front.pid}"
    deadline = time.monotonic() + 60
    while not (making / pch.GCH).exists() and time.monotonic() < deadline:
        assert front.poll() is None, front.stderr.read()
        time.sleep(0.1)
    time.sleep(2)  # the compiler is well into the header
    os.killpg(front.pid, signal.SIGKILL)
    front.wait()
    assert making.is_dir() and not pch_folders(cache)  # killed mid-way, nothing in place

    assert_correct(judge(problem, cache, tmp_path, GOOD_A, GOOD_B))
    [folder] = pch_folders(cache)
    assert pch.is_complete(folder) and not making.exists()


# ------------------------------------------------------------------ what is cached
@slow
def test_real_compile_error_is_cached(made, tmp_path):
    cache = tmp_path / "cache"
    clone_pch(made, cache)
    b = builder(cache)
    first = b.build(BROKEN, tmp_path / "w1")
    assert first.info.status == "compile_error" and not first.info.cache_hit
    assert "expected primary-expression" in first.detail
    # the compiler's first diagnostic, not torch's ninja command line
    assert re.match(r"main\.cpp:\d+:\d+: error: expected primary-expression", first.error), \
        first.error
    assert first.harness_error is None and first.retried is None
    marker = cache / "builds" / first.info.cache_key / MARKER
    assert json.loads(marker.read_text())["status"] == "compile_error"

    again = b.build(BROKEN, tmp_path / "w2")
    assert again.info.status == "compile_error" and again.info.cache_hit
    assert again.error == first.error


@slow
def test_toolchain_failure_is_not_cached(made, tmp_path):
    """The front script of our cache is gone (no compile runs at all): a harness fault
    after one retry, nothing cached, and a stale cached error of the same kind (as
    older versions wrote) is not served either. Once the toolchain is whole, it builds."""
    cache = tmp_path / "cache"
    b = builder(cache)
    key = cache_key(GOOD_A, b.fingerprint)
    poisoned = {"status": "compile_error", "error": "RuntimeError: Error building extension",
                "detail": f"main.cpp:1:10: fatal error: {cache}/pch/{'0' * 24}/torch/"
                          f"extension.h: No such file or directory"}
    (cache / "builds" / key).mkdir(parents=True)
    (cache / "builds" / key / MARKER).write_text(json.dumps(poisoned))
    Path(b.env["CXX"]).unlink()

    failed = b.build(GOOD_A, tmp_path / "w1")
    assert not failed.info.cache_hit  # the poisoned entry was not served
    assert failed.info.status == "harness_error" and not failed.usable
    assert failed.harness_error.startswith("a file of ours is missing")
    assert "kb-pch-g++: not found" in failed.harness_error
    assert failed.retried == failed.harness_error
    assert not (cache / "builds" / key / MARKER).exists()

    again = b.build(GOOD_A, tmp_path / "w2")
    assert not again.info.cache_hit and again.info.status == "harness_error"

    clone_pch(made, cache)  # spares this test making one
    healed = builder(cache)  # reinstalls the front
    assert healed.build(GOOD_A, tmp_path / "w3").info.status == "ok"


@slow
def test_pch_that_gcc_rejects_is_retried_without_it(tmp_path):
    """A PCH of torch's header our checks pass (its marker forged to the truncated size)
    but GCC cannot read: the first compile fails on it, the retry without the PCH builds;
    the success is cached, the failure is not blamed on the candidate. Without the slim
    tier, whose own failure is the next tier's business (next test)."""
    cache = tmp_path / "cache"
    b = builder(cache, full_only=True)
    assert b.build(GOOD_B, tmp_path / "w0").info.status == "ok"
    [folder] = pch_folders(cache)
    assert not folder_is_slim(folder)
    truncate_and_forge(folder)
    assert pch.is_complete(folder)

    out = b.build(GOOD_A, tmp_path / "w1")
    assert out.info.status == "ok" and out.harness_error is None, (out.error, out.detail)
    assert out.retried.startswith("the precompiled header could not be read")
    assert json.loads((Path(out.extensions_dir) / MARKER).read_text())["status"] == "ok"


@slow
def test_a_slim_pch_that_gcc_rejects_leaves_the_build_to_torchs_header(made, tmp_path):
    """The slim tier's PCH damaged the same way: its compile fails, the front compiles
    with torch's header instead (making its PCH), and no retry is needed."""
    cache = tmp_path / "cache"
    folder = clone_pch(made, cache)
    assert folder_is_slim(folder)  # what the made builds' sources needed
    truncate_and_forge(folder)

    out = builder(cache).build(GOOD_A, tmp_path / "w1")
    assert out.info.status == "ok" and out.harness_error is None, (out.error, out.detail)
    assert out.retried is None
    assert sorted(folder_is_slim(f) for f in pch_folders(cache)) == [False, True]


@slow
def test_timeout_while_making_pch_is_retried_without_it(tmp_path):
    """A fresh cache and a build timeout far below what making the PCH takes: the first
    try dies making it, the second goes without it. Whatever the second gives (a build
    on a fast machine, a timeout here), the first timeout is not the candidate's, and
    nothing but a success is cached."""
    cache = tmp_path / "cache"
    out = builder(cache, timeout_s=12).build(GOOD_A, tmp_path / "w1")
    assert out.retried == "the build timed out while a precompiled header was being made"
    assert out.harness_error is None  # the second try made no PCH: its verdict stands
    assert out.info.status in ("ok", "timeout"), (out.error, out.detail)
    cached = (Path(out.extensions_dir) / MARKER).exists()
    assert cached == (out.info.status == "ok")


def test_torch_locks_left_by_children_are_cleared(problem, tmp_path):
    """A child killed while torch's FileBaton was held (a time limit, Ctrl-C) left
    `<key>/<extension>/lock`, and every later load of that build waited on it until its
    load budget ran out: a `timeout` charged to the candidate. A lock made during the run
    goes at its end (every child has ended), one older than any build and run at its
    start; one that another run's child may still hold stays."""
    cache = tmp_path / "cache"
    during, recent, stale = (cache / "builds" / k / "ext" / "lock" for k in ("a", "b", "c"))
    cfg = config(cache, tmp_path)
    now = time.time()
    for lock, made in ((during, now + 3600), (recent, now - 60),
                       (stale, now - cfg.build_timeout_s - cfg.run_timeout_s - 60)):
        lock.parent.mkdir(parents=True)
        lock.write_text("")
        os.utime(lock, (made, made))
    records = list(evaluate([(problem, 0, reference_copy(problem))], cfg))
    assert records[0].status == "correct", records[0]
    assert not during.exists() and recent.exists() and not stale.exists()
