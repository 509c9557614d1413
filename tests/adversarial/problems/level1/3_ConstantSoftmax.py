import torch
import torch.nn as nn


class Model(nn.Module):
    """A degenerate problem on purpose: softmax over a dimension of size 1 is 1.0 for any
    input, so the reference output does not depend on the inputs and a constant answer
    passes every correctness trial (kb_eval.check flags it; eval voids its speedups)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 1)]


def get_init_inputs():
    return []
