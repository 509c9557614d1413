"""Conv2d 3x3, stride 1, padding 1, 64 -> 128 channels, no bias, on x (32, 64, 56, 56)."""

import torch
import torch.nn as nn

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE, KERNEL = 32, 64, 128, 56, 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]
