"""BERT-base intermediate activation: exact (erf) GELU on x (64, 64, 3072)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, INTERMEDIATE = 64, 64, 3072


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)  # approximate="none": 0.5 * x * (1 + erf(x / sqrt(2)))


def get_inputs():
    return [torch.randn(BATCH, SEQ, INTERMEDIATE)]


def get_init_inputs():
    return []
