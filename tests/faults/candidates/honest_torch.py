"""Honest (pure PyTorch): evaluated before and after the faults; its record must survive."""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return 2 * x + y
