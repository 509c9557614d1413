"""The CUDA compiler front (kb_eval/eval/schedule/nvcc_front.py) with the real nvcc: a .cu
that includes torch/extension.h compiles against the slim header when it can, against the
real one when it needs more, and a source that is wrong fails with the real compile's own
diagnostics. A tiny stand-in include tree keeps each compile at a second or two (torch's
own headers take a minute on this CPU); the GPU tests build real candidates through it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kb_eval.eval.schedule import nvcc_front

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH")

# Stand-ins: the lean tier's headers hold at::lean_api and the dtypes, types.h adds
# torch::twice, extension.h adds what only the full header has.
TENSOR_H = ("#pragma once\nnamespace at { enum class ScalarType { A };\n"
            + "".join(f"constexpr auto {b} = ScalarType::A;\n" for b in nvcc_front.LEAN_DTYPES.values())
            + "inline int lean_api(int x) { return x + 1; } }\n")
TYPES_H = ("#pragma once\n#include <ATen/core/Tensor.h>\n"
           "namespace torch { using namespace at; inline int twice(int x) { return 2 * x; } }\n")
EXTENSION_H = ("#pragma once\n#include <torch/types.h>\n"
               "namespace torch { namespace nn { inline int relu(int x) { return x > 0 ? x : 0; } } }\n")
KERNEL = "__global__ void k(int* p) { p[0] = 1; }\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    inc = tmp_path / "inc"
    for header in nvcc_front.LEAN_INCLUDES:
        (inc / header).parent.mkdir(parents=True, exist_ok=True)
        (inc / header).write_text("#pragma once\n")
    (inc / "ATen" / "core" / "Tensor.h").write_text(TENSOR_H)
    (inc / "torch").mkdir()
    (inc / "torch" / "types.h").write_text(TYPES_H)
    (inc / "torch" / "extension.h").write_text(EXTENSION_H)
    return tmp_path


def compile_through_front(tree: Path, body: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    front = nvcc_front.install(tree / "front", NVCC)
    source, obj = tree / "cuda.cu", tree / "cuda.o"
    source.write_text(body)
    obj.unlink(missing_ok=True)
    done = subprocess.run([front["PYTORCH_NVCC"], "-isystem", str(tree / "inc"), "-c",
                           str(source), "-o", str(obj)], capture_output=True, text=True,
                          env={**os.environ, **front, **env}, timeout=300)
    return done, obj


def header_used(obj: Path) -> str | None:
    marker = Path(str(obj) + nvcc_front.MARKER_SUFFIX)
    return marker.read_text() if marker.exists() else None


def test_a_source_that_needs_only_the_lean_api_compiles_against_the_lean_header(tree):
    done, obj = compile_through_front(
        tree, "#include <torch/extension.h>\n" + KERNEL +
        "int f() { return torch::lean_api(2) + (torch::kFloat32 == torch::kInt64); }\n")
    assert done.returncode == 0, done.stderr
    assert obj.is_file() and header_used(obj) == "lean"


def test_a_source_that_needs_the_tensor_api_compiles_against_the_slim_header(tree):
    done, obj = compile_through_front(
        tree, "#include <torch/torch.h>\n" + KERNEL + "int f() { return torch::twice(2); }\n")
    assert done.returncode == 0, done.stderr
    assert obj.is_file() and header_used(obj) == "slim"
    assert "twice" not in done.stderr  # the lean try's complaint is not shown


def test_a_source_that_needs_the_full_header_is_compiled_with_it(tree):
    done, obj = compile_through_front(
        tree, "#include <torch/extension.h>\n" + KERNEL + "int f() { return torch::nn::relu(-1); }\n")
    assert done.returncode == 0, done.stderr
    assert obj.is_file() and header_used(obj) == "full"
    assert "relu" not in done.stderr  # the slim try's complaint is not shown


def test_a_wrong_source_fails_with_the_real_compiles_diagnostics_only(tree):
    done, obj = compile_through_front(
        tree, "#include <torch/extension.h>\n" + KERNEL + "int f() { return undeclared_name; }\n")
    assert done.returncode != 0 and not obj.exists() and header_used(obj) is None
    assert done.stderr.count("error detected") == 1, done.stderr  # one compile's, not three
    assert str(tree / "front") not in done.stderr + done.stdout


def test_the_bypass_and_sources_without_the_headers_get_the_real_compile(tree):
    done, obj = compile_through_front(tree, "#include <torch/extension.h>\n" + KERNEL +
                                      "int f() { return torch::twice(2); }\n",
                                      KB_PCH_BYPASS="1")
    assert done.returncode == 0, done.stderr
    assert header_used(obj) == "full"
    done, obj = compile_through_front(tree, "#include <cuda_runtime.h>\n" + KERNEL)
    assert done.returncode == 0, done.stderr
    assert header_used(obj) == "full"


def test_torch_types_h_alone_gets_the_lean_tier_then_the_real_header(tree):
    """load_inline starts every CUDA source with torch/types.h: the lean tier stands in
    for it; the slim tier is torch/types.h itself, so it is not tried."""
    done, obj = compile_through_front(tree, "#include <torch/types.h>\n" + KERNEL +
                                      "int f() { return torch::lean_api(1); }\n")
    assert done.returncode == 0 and header_used(obj) == "lean", done.stderr
    done, obj = compile_through_front(tree, "#include <torch/types.h>\n" + KERNEL +
                                      "int f() { return torch::twice(1); }\n")
    assert done.returncode == 0 and header_used(obj) == "full", done.stderr


def test_other_calls_pass_through_unchanged(tree):
    front = nvcc_front.install(tree / "front", NVCC)
    done = subprocess.run([front["PYTORCH_NVCC"], "--version"], capture_output=True, text=True,
                          env={**os.environ, **front}, timeout=60)
    real = subprocess.run([NVCC, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == real.stdout


def test_install_rewrites_nothing_that_is_unchanged(tree):
    """ninja compares dates: a tier header rewritten by every run would rebuild every
    cached extension when its run child loads it."""
    nvcc_front.install(tree / "front", NVCC)
    headers = [tree / "front" / tier / "torch" / "extension.h" for tier in nvcc_front.TIERS]
    before = [h.stat().st_mtime_ns - 10**9 for h in headers]
    for h, t in zip(headers, before):
        os.utime(h, ns=(t, t))
    nvcc_front.install(tree / "front", sys.executable)
    assert [h.stat().st_mtime_ns for h in headers] == before


# ------------------------------------------------------------------ GPU: real torch headers
TWICE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void twice_kernel(const float* x, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = x[i] + x[i];
}
torch::Tensor twice(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
    auto out = torch::empty_like(x);
    twice_kernel<<<64, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), (int)x.numel());
    return %s;
}
"""
CANDIDATE = '''
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline("%s", cpp_sources="torch::Tensor twice(torch::Tensor x);",
                  cuda_sources=r"""%s""", functions=["twice"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name,result,header", [
    ("kb_front_lean", "out", "lean"),
    # operators on tensors are in torch/types.h, not the lean header
    ("kb_front_slim", "out + 0", "slim"),
    # torch::nn::functional is only in the full header: both tiers fail, the real one builds
    ("kb_front_full", "torch::nn::functional::relu(out)", "full")])
def test_a_real_candidate_builds_loads_and_computes(tmp_path, monkeypatch, name, result, header):
    from kb_eval.eval.schedule.build import Builder, front_name, toolchain_fingerprint
    from kb_eval.problems import load_module

    env = nvcc_front.install(tmp_path / "nvcc", nvcc_front.real_nvcc())
    builder = Builder(tmp_path / "builds", toolchain_fingerprint("", front=front_name(env)), env,
                      timeout_s=600, mem_limit_mb=None)
    source = CANDIDATE % (name, TWICE % result)
    outcome = builder.build(source, tmp_path / "work")
    assert outcome.info.status == "ok", (outcome.error, outcome.detail)
    assert outcome.info.cuda_header == header
    # The run child's import finds the build up to date: no compile (seconds, not a minute)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", outcome.extensions_dir)
    started = time.monotonic()
    module = load_module(source, name)
    assert time.monotonic() - started < 15
    x = torch.randn(1000, device="cuda")
    assert torch.equal(module.ModelNew()(x), (2 * x).relu() if header == "full" else 2 * x)



def test_a_crash_of_the_front_is_ours_not_the_candidates():
    from kb_eval.eval.child.build_task import toolchain_fault

    text = ('Traceback (most recent call last):\n  File "/x/kb_eval/eval/schedule/nvcc_front.py"'
            ', line 90, in main\nKeyError: \'KB_NVCC_REAL\'\nninja: build stopped')
    assert "the compiler front failed" in (toolchain_fault(text, []) or "")


def test_a_run_inside_a_build_child_wraps_the_real_nvcc_not_the_front(tree, monkeypatch):
    front = nvcc_front.install(tree / "front", NVCC)
    for key, value in front.items():
        monkeypatch.setenv(key, value)
    assert nvcc_front.real_nvcc() == NVCC
    monkeypatch.setenv("PYTORCH_NVCC", "ccache " + NVCC)
    assert nvcc_front.real_nvcc() == "ccache " + NVCC


def test_both_fronts_obey_the_same_bypass():
    from kb_eval.eval.schedule import pch

    assert nvcc_front.BYPASS_VAR == pch.BYPASS_VAR


def test_the_build_child_reads_the_fronts_notes_by_their_own_names():
    """build_task keeps its own copy (no scheduler module where candidate code runs)."""
    from kb_eval.eval.child import build_task

    assert build_task.HEADER_MARKER == nvcc_front.MARKER_SUFFIX
    assert build_task.HEADER_TIERS == (*nvcc_front.TIERS, "full")


def test_the_build_reports_each_header_its_cuda_files_used_in_tier_order(tmp_path):
    from kb_eval.eval.child.build_task import cuda_header

    assert cuda_header(tmp_path) is None  # no CUDA file
    for name, header in (("a", "full"), ("b", "lean"), ("c", "lean")):
        (tmp_path / f"{name}.o{nvcc_front.MARKER_SUFFIX}").write_text(header)
    assert cuda_header(tmp_path) == "lean+full"


def test_a_source_that_says_requires_grad_skips_the_lean_tier(tree):
    """The lean tier's factories (at::'s) refuse options with requires_grad set, which
    torch's accept: such a source is compiled with torch/types.h or more."""
    done, obj = compile_through_front(
        tree, "#include <torch/extension.h>\n" + KERNEL +
        "int f() { return torch::lean_api(2); }  // .requires_grad(true)\n")
    assert done.returncode == 0, done.stderr
    assert header_used(obj) == "slim"
