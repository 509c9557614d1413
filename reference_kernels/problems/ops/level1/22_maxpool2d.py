"""MaxPool2d 3x3, stride 2, padding 1 (ResNet stem) on x (32, 64, 112, 112) -> (32, 64, 56, 56)."""

import torch
import torch.nn as nn

BATCH, CHANNELS, SIZE = 32, 64, 112


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [3, 2, 1]
