"""Honest: the reference's operation with its weights declared by hand as nn.Linear makes
them, through the legacy `torch.Tensor(out, in)` constructor, and the bias less the
constant folded into a buffer at construction (a model-written level2/68 kernel's
__init__). min(a, c) - c = min(a - c, 0), one addmm and a clamp."""

import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        self.reset_parameters()
        self.constant = nn.Parameter(torch.tensor(constant))
        self.register_buffer("adjusted_bias", self.bias.clone() - self.constant)

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return torch.addmm(self.adjusted_bias, x, self.weight.t()).clamp_max(0.0)
