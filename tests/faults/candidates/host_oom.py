"""Fault: allocate host memory well past the per-child limit (1 GiB at a time, touched;
capped at 12 GiB so a broken limit cannot take the machine down)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        hoard = []
        for _ in range(12):
            hoard.append(torch.ones(1 << 28))  # 1 GiB of fp32, written
        return 2 * x + y
