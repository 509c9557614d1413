"""Fused elementwise expression y = (a + b) * c on three (4096, 4096) tensors (64 MB each fp32)."""

import torch
import torch.nn as nn

ROWS, COLS = 4096, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (a + b) * c


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
