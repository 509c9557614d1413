"""A compile a candidate starts in its first forward runs in the build pool, not on the
device lane (kb_eval/eval/schedule/first_call.py). Real compiler, real children, cpp."""

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


def test_only_a_compile_inside_a_function_counts_as_lazy():
    assert compiles_lazily(LAZY)
    assert compiles_lazily("import torch.utils.cpp_extension as c\n"
                           "class M:\n    def __init__(self):\n        c.load(name='a')\n")
    assert not compiles_lazily("from torch.utils.cpp_extension import load_inline\n"
                               "ext = load_inline('a', cpp_sources='')\n")
    assert not compiles_lazily("def f(:\n")


@pytest.mark.slow
def test_a_lazy_compile_is_done_before_the_run_child_starts(tmp_path, build_cache_dir):
    problem = {p.problem_id: p for p in load_problems(str(kit.PROBLEMS))}[1]
    # the shared cache (its precompiled header); a new source each run: a fresh build
    source = f"# {uuid.uuid4().hex}\n{LAZY}"
    config = EvalConfig(backend="cpp", live_baseline=True, jobs=2, cache_dir=build_cache_dir,
                        results_dir=tmp_path / "results", run_timeout_s=120,
                        timing=TimingSettings(warmup=1, trials=3))
    [record] = evaluate([(problem, 0, source)], config)
    assert record.status == "correct", (record.error, record.detail)
    assert record.build.status == "ok" and record.build.first_call_s is not None
