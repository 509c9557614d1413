"""RMSNorm y = x / sqrt(mean(x^2, last dim) + eps) * weight on x (8192, 4096) (128 MB fp32)."""

import torch
import torch.nn as nn

ROWS, FEATURES = 8192, 4096
EPS = 1e-6


class Model(nn.Module):
    def __init__(self, features: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(mean_square + self.eps) * self.weight


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES, EPS]
