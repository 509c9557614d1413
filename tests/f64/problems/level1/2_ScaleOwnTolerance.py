import torch
import torch.nn as nn

# This problem's own rule: allclose with a loose absolute tolerance.
KB_TOLERANCE = {"atol": 0.5, "rtol": 0.0, "rule": "kernelbench"}


class Model(nn.Module):
    def forward(self, x):
        return 3 * x


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
