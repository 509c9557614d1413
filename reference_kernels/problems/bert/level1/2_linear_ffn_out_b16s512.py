"""BERT-base FFN output projection nn.Linear(3072, 768) on x (16, 512, 3072)."""

import torch
import torch.nn as nn

BATCH, SEQ, INTERMEDIATE, HIDDEN = 16, 512, 3072, 768


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, INTERMEDIATE)]


def get_init_inputs():
    return [INTERMEDIATE, HIDDEN]
