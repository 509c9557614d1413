"""Matrix multiplication with a transposed operand C = A @ B^T, A (4096, 2048), B (4096, 2048)."""

import torch
import torch.nn as nn

M, K, N = 4096, 2048, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
