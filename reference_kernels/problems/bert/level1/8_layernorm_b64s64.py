"""BERT-base LayerNorm over hidden 768 (eps 1e-12) on x (64, 64, 768)."""

import torch
import torch.nn as nn

BATCH, SEQ, HIDDEN = 64, 64, 768
EPS = 1e-12


class Model(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EPS]
