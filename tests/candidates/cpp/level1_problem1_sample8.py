# right values, but computed in place into an input and returned: aliasing + mutation
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return x.mul_(2).add_(y)
