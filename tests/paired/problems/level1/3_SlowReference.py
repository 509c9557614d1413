import torch
import torch.nn as nn


class Model(nn.Module):
    """a @ b, computed four times by a deliberately wasteful reference (the last product is
    returned): a candidate that computes it once is ~4x faster and exactly right"""

    def forward(self, a, b):
        out = a @ b
        for _ in range(3):
            out = a @ b
        return out


def get_inputs():
    return [torch.randn(256, 512), torch.randn(512, 512)]


def get_init_inputs():
    return []
