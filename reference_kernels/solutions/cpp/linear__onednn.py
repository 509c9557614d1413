"""CPU (C++) BERT Linear y = x W^T + b: fp32 through oneDNN's matmul (PyTorch's
mkldnn::_linear_pointwise, bias fused), other dtypes one at::addmm as eager's F.linear.
On AMD CPUs MKL's sgemm (what eager's fp32 addmm calls) does not take the AVX-512 kernels
that oneDNN's JIT emits. Answers nn.Linear(768, 768) and nn.Linear(3072, 768)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/addmm.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars,
// str? algorithm), looked up once; absent in builds without oneDNN.
static const std::optional<c10::OperatorHandle>& onednn_linear() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op;
}

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(x.is_cpu(), "linear_forward: CPU tensors only");
  const auto x2 = x.reshape({-1, x.size(-1)});
  at::Tensor y;
  const auto& op = onednn_linear();
  if (op && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat) {
    torch::jit::Stack stack{x2, weight, bias, std::string("none"), c10::List<std::optional<at::Scalar>>(),
                            c10::IValue()};
    op->callBoxed(&stack);
    y = stack.at(0).toTensor();
  } else {
    y = at::addmm(bias, x2, weight.t());
  }
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return y.view(shape);
}
"""

_ext = load_inline(name="kb_cpp_linear_onednn", cpp_sources=CPP_SOURCE, functions=["linear_forward"],
                   extra_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_forward(x, self.dense.weight, self.dense.bias)
