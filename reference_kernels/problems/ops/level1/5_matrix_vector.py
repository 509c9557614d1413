"""Matrix-vector product y = A @ x, A (8192, 8192) (256 MB fp32), x (8192, 1)."""

import torch
import torch.nn as nn

M, K = 8192, 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
