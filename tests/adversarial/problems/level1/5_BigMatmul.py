import torch
import torch.nn as nn


class Model(nn.Module):
    """out = a @ b with 4096^2 fp32 operands (GPU exploits: milliseconds of work to hide)"""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
