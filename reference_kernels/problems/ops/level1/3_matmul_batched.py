"""Batched matrix multiplication C[i] = A[i] @ B[i], A (128, 512, 256), B (128, 256, 512)."""

import torch
import torch.nn as nn

BATCH, M, K, N = 128, 512, 256, 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
