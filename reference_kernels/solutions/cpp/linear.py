"""CPU (C++) BERT Linear y = x W^T + b: one at::addmm on the flattened tokens, the bias
folded into the GEMM's C operand, in the input's dtype (bf16 GEMMs accumulate in float).
Answers nn.Linear(768, 768) and nn.Linear(3072, 768) at every batch/sequence shape."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(x.is_cpu(), "linear_forward: CPU tensors only");
  auto y = at::addmm(bias, x.reshape({-1, x.size(-1)}), weight.t());
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return y.view(shape);
}
"""

_ext = load_inline(name="kb_cpp_linear", cpp_sources=CPP_SOURCE, functions=["linear_forward"],
                   extra_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_forward(x, self.dense.weight, self.dense.bias)
