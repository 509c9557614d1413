"""A compile a candidate starts in its first forward, or in an `__init__` that compiles
only with a GPU in sight, runs in the build pool, not on the device lane
(kb_eval/eval/schedule/first_call.py; the child's side: eval/child/first_call_task.py).
Real compiler, real children, cpp."""

from __future__ import annotations

import uuid

import pytest

from candidates import eval_kit as kit
from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.schedule.first_call import compiles_lazily
from kb_eval.problems import load_problems
from kb_eval.timing import TimingSettings

# Problem 1 (out = 2x + y), compiled on the first forward. The candidate answers right
# only if its extension was already built when its run child first called forward: that
# is, only if the build pool ran the compile ahead. Otherwise every output is off by one.
LAZY = r'''
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) { return 2 * x + y; }
"""
NAME = "kb_first_call_lazy"
_ext = []


class ModelNew(nn.Module):
    def forward(self, x, y):
        if not _ext:
            built = os.path.isdir(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], NAME))
            _ext.append((load_inline(NAME, cpp_sources=SOURCE, functions=["scale_add"]),
                         0.0 if built else 1.0))
        ext, off = _ext[0]
        return ext.scale_add(x, y) + off
'''

# The same, compiled in __init__ only where a GPU is in sight (the build child's call is
# told one is: first_call.gpu_in_sight); it answers right only if the build pool compiled it.
GUARDED = r'''
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) { return 2 * x + y; }
"""
NAME = "kb_first_call_guarded"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if torch.cuda.is_available() and torch.cuda.device_count() >= 1:
            self.ext = load_inline(NAME, cpp_sources=SOURCE, functions=["scale_add"])

    def forward(self, x, y):
        folder = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], NAME)
        built = os.path.isdir(folder) and any(f.endswith(".so") for f in os.listdir(folder))
        return 2 * x + y + (0.0 if built else 1.0)
'''


def test_only_a_compile_inside_a_function_counts_as_lazy():
    assert compiles_lazily(LAZY)
    assert compiles_lazily("import torch.utils.cpp_extension as c\n"
                           "class M:\n    def __init__(self):\n        c.load(name='a')\n")
    assert not compiles_lazily("from torch.utils.cpp_extension import load_inline\n"
                               "ext = load_inline('a', cpp_sources='')\n")
    assert not compiles_lazily("def f(:\n")
    assert compiles_lazily(GUARDED)
    assert compiles_lazily("import torch\nif torch.cuda.is_available():\n"
                           "    ext = load_inline('a', cpp_sources='')\n")


def test_the_call_sees_a_gpu_and_torchs_build_code_the_truth():
    """Inside gpu_in_sight the candidate is told a GPU is there; torch's build code (here
    a stand-in for _jit_compile that only looks) is not; after it, nothing is changed."""
    import torch
    import torch.utils.cpp_extension as cpp

    from kb_eval.eval.child.first_call_task import gpu_in_sight

    real, seen = cpp._jit_compile, []
    cpp._jit_compile = lambda: seen.append((torch.cuda.is_available(),
                                            torch.cuda.device_count()))
    try:
        with gpu_in_sight():
            seen.append((torch.cuda.is_available(), torch.cuda.device_count()))
            cpp._jit_compile()
            seen.append((torch.cuda.is_available(), torch.cuda.device_count()))
    finally:
        cpp._jit_compile = real
    truth = (torch.cuda.is_available(), torch.cuda.device_count())
    assert seen == [(True, max(1, truth[1])), truth, (True, max(1, truth[1]))]


@pytest.mark.slow
def test_a_lazy_compile_is_done_before_the_run_child_starts(tmp_path, build_cache_dir):
    problem = {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}[1]
    # the shared cache (its precompiled header); a new source each run: a fresh build
    source = f"# {uuid.uuid4().hex}\n{LAZY}"
    config = EvalConfig(backend="cpp", live_baseline=True, jobs=2, cache_dir=build_cache_dir,
                        results_dir=tmp_path / "results", run_timeout_s=120,
                        timing=TimingSettings(warmup=1, trials=3))
    guarded = f"# {uuid.uuid4().hex}\n{GUARDED}"
    records = evaluate([(problem, 0, source), (problem, 1, guarded)], config)
    for record in records:
        assert record.status == "correct", (record.sample, record.error, record.detail)
        assert record.build.status == "ok" and record.build.first_call_s is not None
