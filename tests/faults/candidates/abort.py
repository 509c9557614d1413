"""Fault: abort() inside forward."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        os.abort()
