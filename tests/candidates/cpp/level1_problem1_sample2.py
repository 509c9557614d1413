# incorrect: wrong shape
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return (2 * x + y)[:, :100]
