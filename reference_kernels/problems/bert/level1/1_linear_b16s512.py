"""BERT-base projection nn.Linear(768, 768) (attention q/k/v/output) on hidden states x (16, 512, 768)."""

import torch
import torch.nn as nn

BATCH, SEQ, HIDDEN = 16, 512, 768


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HIDDEN]
