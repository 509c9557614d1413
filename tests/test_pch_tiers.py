"""The C++ compiler front's slim tier (kb_eval/eval/schedule/pch.py) with the real GCC: a
compile that starts with torch/extension.h is tried against the slim header (its own
precompiled header) first and against torch's when it needs more, and a wrong source
fails with the real compile's diagnostics only. A tiny stand-in include tree keeps each
compile under a second (torch's own headers take ~45 s to precompile here); the build
cache tests (test_build_cache.py) run the front on real candidates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb_eval.eval.schedule import pch

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="no g++ on PATH")

# The slim header's includes hold torch::twice and the bindings; torch's adds torch::nn.
STAND_INS = {
    "torch/types.h": "#pragma once\nnamespace torch { inline int twice(int x) { return 2 * x; } }\n",
    "torch/csrc/utils/pybind.h": "#pragma once\nnamespace py { inline int bind() { return 1; } }\n",
    "torch/csrc/Exceptions.h": "#pragma once\n",
    "torch/extension.h": ("#pragma once\n#include <torch/types.h>\n#include <torch/csrc/utils/"
                          "pybind.h>\nnamespace torch { namespace nn { inline int relu(int x) "
                          "{ return x > 0 ? x : 0; } } }\n"),
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name, text in STAND_INS.items():
        (tmp_path / "inc" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "inc" / name).write_text(text)
    return tmp_path


def compile_through_front(tree: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    front = pch.install(tree / "pch", GXX)
    source = tree / "main.cpp"
    source.write_text(f"#include <{pch.HEADER}>\n{body}")
    return subprocess.run([front["CXX"], "-isystem", str(tree / "inc"), "-std=c++17", "-c",
                           str(source), "-o", str(tree / "main.o")], capture_output=True,
                          text=True, env={**os.environ, **front, **env}, timeout=120)


def precompiled(tree: Path) -> list[str]:
    """Which headers were precompiled: "slim" or "torch" for each complete PCH folder."""
    folders = [f for f in (tree / "pch").iterdir() if pch.is_complete(f)]
    return sorted("slim" if (f / pch.HEADER).read_text() == pch.SLIM else "torch"
                  for f in folders)


def test_a_source_that_needs_the_tensor_api_compiles_against_the_slim_header(tree):
    done = compile_through_front(tree, "int f() { return torch::twice(2) + py::bind(); }\n")
    assert done.returncode == 0, done.stderr
    assert (tree / "main.o").is_file() and precompiled(tree) == ["slim"]
    again = compile_through_front(tree, "int g() { return torch::twice(3); }\n")
    assert again.returncode == 0 and precompiled(tree) == ["slim"]  # its PCH, made once


def test_a_source_that_needs_torchs_header_is_compiled_with_it(tree):
    done = compile_through_front(tree, "int f() { return torch::nn::relu(-1); }\n")
    assert done.returncode == 0, done.stderr
    assert precompiled(tree) == ["slim", "torch"]
    assert "relu" not in done.stderr  # the slim try's complaint is not shown


def test_a_wrong_source_fails_with_the_real_compiles_diagnostics_only(tree):
    done = compile_through_front(tree, "int f() { return undeclared_name; }\n")
    assert done.returncode != 0 and not (tree / "main.o").exists()
    assert done.stderr.count("error:") == 1, done.stderr  # one compile's, not two


def test_the_slim_tier_can_be_skipped_and_the_bypass_skips_both(tree):
    done = compile_through_front(tree, "int f() { return torch::twice(2); }\n",
                                 **{pch.SLIM_VAR: "0"})
    assert done.returncode == 0 and precompiled(tree) == ["torch"], done.stderr
    shutil.rmtree(tree / "pch")
    done = compile_through_front(tree, "int f() { return torch::twice(2); }\n",
                                 **{pch.BYPASS_VAR: "1"})
    assert done.returncode == 0 and precompiled(tree) == [], done.stderr


def test_the_slim_header_is_rewritten_only_when_it_changed(tree):
    """ninja compares dates: a header rewritten by every run rebuilds every cached build."""
    pch.install(tree / "pch", GXX)
    header = tree / "pch" / pch.SLIM_FOLDER / pch.HEADER
    old = header.stat().st_mtime_ns - 10**9
    os.utime(header, ns=(old, old))
    pch.install(tree / "pch", sys.executable)
    assert header.stat().st_mtime_ns == old and header.read_text() == pch.SLIM


def test_a_version_query_goes_to_the_compiler_without_python(tmp_path):
    """torch asks `CXX -dumpfullversion -dumpversion` in every run child: the front
    script answers it with the real compiler, not a Python start; a compile still goes
    through the front's Python."""
    fake_cxx = tmp_path / "fake-g++"
    fake_cxx.write_text('#!/bin/sh\necho "compiler $*"\n')
    fake_cxx.chmod(0o755)
    front = tmp_path / "front.py"
    front.write_text('import sys\nprint("python", *sys.argv[1:])\n')
    script = tmp_path / "kb-pch-g++"
    script.write_text(pch.front_script(str(front), direct_var="KB_PCH_CXX"))
    script.chmod(0o755)
    env = {**os.environ, "KB_PCH_CXX": str(fake_cxx)}

    def run(*args: str) -> str:
        return subprocess.run([str(script), *args], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()
    assert run("-dumpfullversion", "-dumpversion") == "compiler -dumpfullversion -dumpversion"
    assert run("--version") == "compiler --version"
    assert run("-c", "main.cpp", "-o", "main.o") == "python -c main.cpp -o main.o"
    assert run("-v", "-c", "main.cpp") == "python -v -c main.cpp"
