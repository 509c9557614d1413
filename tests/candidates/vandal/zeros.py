# Wrong: all zeros (passes only against zeroed references)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.zeros_like(x)
