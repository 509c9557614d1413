"""Max reduction over dim 1 of x (32, 4096, 256) (128 MB fp32) -> (32, 256)."""

import torch
import torch.nn as nn

BATCH, DIM1, DIM2 = 32, 4096, 256
REDUCE_DIM = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [REDUCE_DIM]
