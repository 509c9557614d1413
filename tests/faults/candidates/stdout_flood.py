"""Fault: print gigabytes to stdout (4 GiB in 1 MiB lines)."""
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        line = "x" * (1 << 20) + "\n"
        for _ in range(4096):
            sys.stdout.write(line)
        return 2 * x + y
