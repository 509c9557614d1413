"""Depthwise Conv2d 3x3 (groups = channels = 64), padding 1, no bias, on x (32, 64, 112, 112)."""

import torch
import torch.nn as nn

BATCH, CHANNELS, SIZE, KERNEL = 32, 64, 112, 3


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2,
                              groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, KERNEL]
