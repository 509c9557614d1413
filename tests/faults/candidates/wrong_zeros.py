"""Wrong on purpose (all zeros): must stay incorrect even after a candidate has tried to
overwrite the reference outputs with zeros."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.zeros_like(x)
