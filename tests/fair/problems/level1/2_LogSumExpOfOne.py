import torch
import torch.nn as nn


class Model(nn.Module):
    """log-sum-exp over a dimension of size one, less its one value: zeros at every
    position in fp32 and in float64 alike (the log-sum-exp of one value is that value),
    after a GEMM whose values an honest kernel carries through exp and log"""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = self.linear(x).unsqueeze(-1)
        return torch.logsumexp(h, dim=-1) - h.squeeze(-1)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [128, 96]
