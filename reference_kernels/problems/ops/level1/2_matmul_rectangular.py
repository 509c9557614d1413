"""Rectangular matrix multiplication C = A @ B, A (8192, 2048), B (2048, 4096), C (8192, 4096)."""

import torch
import torch.nn as nn

M, K, N = 8192, 2048, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
