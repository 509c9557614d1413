"""AvgPool2d 2x2, stride 2 on x (32, 64, 112, 112) -> (32, 64, 56, 56)."""

import torch
import torch.nn as nn

BATCH, CHANNELS, SIZE = 32, 64, 112


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [2, 2]
