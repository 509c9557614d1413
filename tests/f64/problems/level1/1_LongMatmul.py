import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with a long reduction (16384 terms): fp32's own rounding error is large
    enough that a fixed tolerance cannot tell another summation order from a shortcut."""

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(256, 16384), torch.randn(16384, 256)]


def get_init_inputs():
    return []
