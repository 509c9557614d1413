"""BERT-base FFN output + GELU: y = LayerNorm(GELU(Linear(3072, 768)(x)) + residual), x (64, 64, 3072)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, HIDDEN, INTERMEDIATE = 64, 64, 768, 3072
EPS = 1e-12


class Model(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        # GELU (exact, erf) follows this Linear by design: the fused GEMM epilogue under test.
        return self.norm(F.gelu(self.dense(x)) + residual)


def get_inputs():
    return [torch.randn(BATCH, SEQ, INTERMEDIATE), torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE, EPS]
