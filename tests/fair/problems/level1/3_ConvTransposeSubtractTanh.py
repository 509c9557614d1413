import torch
import torch.nn as nn


class Model(nn.Module):
    """tanh(conv_transpose(x) - bias) (KernelBench level2/5's operation, small)"""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size,
                                                 stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.tanh(self.conv_transpose(x) - self.bias)


def get_inputs():
    return [torch.randn(8, 16, 16, 16)]


def get_init_inputs():
    return [16, 32, 4, (32, 1, 1)]
