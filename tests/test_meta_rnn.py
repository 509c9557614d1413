"""Recurrent layers answer the memory plan's meta forward with their outputs' shapes
(kb_eval/eval/judge/meta_rnn.py), the same shapes as a real forward."""

from __future__ import annotations

import copy
import time

import pytest
import torch
from torch import nn

from kb_eval.eval.judge import reference_worker
from kb_eval.eval.judge.meta_rnn import shape_only_rnns


def _shapes(x):
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    return tuple(_shapes(v) for v in x)


LAYERS = [
    (nn.RNN, {}),
    (nn.GRU, {"batch_first": True}),
    (nn.LSTM, {"num_layers": 3, "bidirectional": True}),
    (nn.LSTM, {"batch_first": True, "proj_size": 5}),
    (nn.GRU, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
]


@pytest.mark.parametrize("cls,kwargs", LAYERS, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_a_recurrent_layer_on_meta_has_its_real_outputs_shapes(cls, kwargs, batched,
                                                               with_state):
    torch.manual_seed(0)
    layer = cls(input_size=7, hidden_size=11, **kwargs)
    steps, batch = 4, 3
    x = torch.randn(*(((batch, steps) if kwargs.get("batch_first") else (steps, batch))
                      if batched else (steps,)), 7)
    args = [x]
    if with_state:
        with torch.no_grad():
            _, state = layer(x)  # a state of the right shape, as a caller would pass it
        args.append(state)
    with torch.no_grad():
        real = layer(*args)

    meta = copy.deepcopy(layer).to("meta")
    assert shape_only_rnns(meta) == 1
    answer = meta(*[a.to("meta") if isinstance(a, torch.Tensor) else
                    tuple(t.to("meta") for t in a) for a in args])
    assert _shapes(answer) == _shapes(real)
    flat = [answer[0], *(answer[1] if isinstance(answer[1], tuple) else [answer[1]])]
    assert all(t.is_meta and t.dtype == x.dtype for t in flat)


def test_other_layers_are_left_alone():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    forwards = [m.forward for m in model.modules()]
    assert shape_only_rnns(model) == 0
    assert [m.forward for m in model.modules()] == forwards


LSTM_PROBLEM = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=6, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.fc(out[:, -1, :]), h


def get_inputs():
    return [torch.randn(4, 512, 16)]


def get_init_inputs():
    return []
'''


def test_the_plan_of_a_deep_lstm_knows_its_outputs_size_at_once():
    """KernelBench level 3's LSTMs and GRUs ran out the plan's 2 s bound on the meta device
    (8-17 s unbounded), their outputs' size unknown; now milliseconds, and the size is
    that of a real forward's outputs (4x10 and 12x4x32 floats)."""
    payload = {"plan": True, "problem_code": LSTM_PROBLEM, "device": "cpu",
               "precision": "fp32"}
    reference_worker.compare_sample(payload, None)  # the meta device's first-use import
    started = time.monotonic()
    plan = reference_worker.compare_sample(payload, None)
    took = time.monotonic() - started
    assert "meta_error" not in plan, plan
    assert plan["out_bytes"] == (4 * 10 + 12 * 4 * 32) * 4
    assert took < 1.0, took


@pytest.mark.parametrize("cls,kwargs", LAYERS, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("batched", [True, False])
def test_a_recurrent_layers_flops_by_rule_match_its_decomposed_count(cls, kwargs, batched):
    """The work count (kb_eval/work.py) takes a recurrent layer's FLOPs by rule instead of
    running it decomposed on the meta device: the rule must give what FlopCounterMode
    counts over that decomposed run."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = cls(input_size=7, hidden_size=11, **kwargs).to("meta")
    steps, batch = 4, 3
    lead = ((batch, steps) if kwargs.get("batch_first") else (steps, batch)) if batched \
        else (steps,)
    x = torch.empty(*lead, 7, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        layer(x)
    tally: list[int] = []
    fast = copy.deepcopy(layer)
    shape_only_rnns(fast, tally)
    fast(x)
    assert counter.get_total_flops() > 0
    assert tally == [counter.get_total_flops()]
