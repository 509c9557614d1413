"""Inclusive prefix sum (cumsum) along dim 1 of x (32768, 1024) (128 MB fp32)."""

import torch
import torch.nn as nn

ROWS, COLS = 32768, 1024
SCAN_DIM = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [SCAN_DIM]
