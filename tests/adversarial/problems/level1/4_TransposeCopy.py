import torch
import torch.nn as nn


class Model(nn.Module):
    """out = x^T as a new contiguous tensor (the work is the copy)"""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
