"""PyTorch's own lazy machinery is not tampering: a candidate that calls torch.compile
(CPU inductor: a real C++ compile in its child) is judged correct with no error flag,
while a candidate that switches TF32 on in an fp32 run, or fakes the wrapper dynamo puts
on torch.manual_seed, is still flagged `tampered`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kb_eval.eval import EvalConfig, evaluate
from kb_eval.eval.child.integrity import Snapshot
from kb_eval.problems import load_problems
from kb_eval.timing import TimingSettings

PROBLEMS = Path(__file__).parent / "adversarial" / "problems"

COMPILED = '''
import torch
import torch.nn as nn


def _scale_add(x, y):
    return x * 2.0 + y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(_scale_add, dynamic=False)

    def forward(self, x, y):
        return self.fn(x, y)
'''

TF32 = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        torch.backends.cuda.matmul.allow_tf32 = True
        return x * 2.0 + y
'''


def test_dynamo_loading_is_not_a_change():
    snap = Snapshot()
    import torch._dynamo  # noqa: F401 - what torch.compile does on first use

    assert snap.changes() == []
    wrapper = torch.manual_seed

    def fake(seed):  # looks like dynamo's wrapper, is not
        return wrapper(0)

    fake.__wrapped__ = wrapper.__wrapped__
    torch.manual_seed = fake
    try:
        assert snap.changes() == ["torch.manual_seed"]
    finally:
        torch.manual_seed = wrapper


@pytest.mark.slow
def test_compiled_candidate_clean_tf32_flagged(tmp_path, build_cache_dir):
    problem = next(p for p in load_problems(str(PROBLEMS)) if p.problem_id == 1)  # 2x + y
    cfg = EvalConfig(backend="cpp", live_baseline=True, timing=TimingSettings(warmup=1, trials=3),
                     correct_trials=2, jobs=2, cache_dir=build_cache_dir,
                     results_dir=tmp_path / "r", run_timeout_s=280)
    records = {r.sample: r for r in evaluate([(problem, 0, COMPILED), (problem, 1, TF32)], cfg)}
    compiled, tf32 = records[0], records[1]
    assert compiled.status == "correct", (compiled.error, compiled.flags)
    assert not [f for f in compiled.flags if f.severity == "error"], compiled.flags
    # its compile ran with the device let go (child/compiles.py), as the child counts it
    assert compiled.phases.get("child_compile", 0) > 0, compiled.phases
    # inductor's cache lives in the source's build entry, so a warm pass loads it
    kept = [f for d in Path(build_cache_dir).rglob("inductor") for f in d.rglob("*")
            if f.is_file()]
    assert kept, "no inductor cache kept in the build cache"
    assert tf32.status == "incorrect" and any(f.code == "tampered" for f in tf32.flags)
