"""SiLU (x * sigmoid(x)) elementwise on x (4096, 8192) (128 MB fp32)."""

import torch
import torch.nn as nn

ROWS, COLS = 4096, 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
