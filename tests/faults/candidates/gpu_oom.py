"""Fault (GPU): allocate device memory 8 GiB at a time until the GPU is full."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        hoard = []
        while True:
            hoard.append(torch.empty(8 << 30, dtype=torch.uint8, device=x.device))
