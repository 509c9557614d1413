# right values, but returned as a tensor subclass
import torch
import torch.nn as nn


class Sneaky(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x, y):
        return (2 * x + y).as_subclass(Sneaky)
