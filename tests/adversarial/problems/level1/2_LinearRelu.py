import torch
import torch.nn as nn


class Model(nn.Module):
    """out = relu(x @ W^T + b): a small fp32 GEMM (lowering its precision shows)"""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 128]
