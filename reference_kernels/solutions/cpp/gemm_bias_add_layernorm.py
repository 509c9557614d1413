"""CPU (C++) BERT attention output y = LayerNorm(x W^T + b + residual): the GEMM with the bias
folded in by at::addmm (in the input's dtype), then one fused epilogue pass per row in
float (at::parallel_for): residual add, two-pass mean/variance (SIMD reductions), affine
LayerNorm, in place. For bf16/fp16 the sum is rounded to that dtype where eager PyTorch
rounds it."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

// Float rows of h (rows x n), in place: h = LayerNorm(h + residual) * gamma + beta.
// T is the model's dtype: the sum is rounded to it where eager PyTorch stores it (a no-op
// for float).
template <typename T>
static void epilogue_rows(at::Tensor& ht, const at::Tensor& rt, const at::Tensor& gt,
                          const at::Tensor& bt, float eps) {
  float* h = ht.data_ptr<float>();
  const float* residual = rt.data_ptr<float>();
  const float *gamma = gt.data_ptr<float>(), *beta = bt.data_ptr<float>();
  const int64_t n = ht.size(1);
  at::parallel_for(0, ht.size(0), 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* v = h + r * n;
      const float* add = residual + r * n;
      float sum = 0, sq = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += (v[i] = float(T(v[i] + add[i])));
      const float mean = sum / n;
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < n; ++i) sq += (v[i] - mean) * (v[i] - mean);
      const float rstd = 1.f / std::sqrt(sq / n + eps);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) v[i] = (v[i] - mean) * rstd * gamma[i] + beta[i];
    }
  });
}

at::Tensor fused_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const at::Tensor& residual, const at::Tensor& gamma,
                         const at::Tensor& beta, double eps) {
  const auto dtype = x.scalar_type();
  TORCH_CHECK(x.is_cpu(), "fused_forward: CPU tensors only");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "fused_forward: float32, bfloat16 or float16 only");
  TORCH_CHECK(residual.numel() == x.numel() / x.size(-1) * weight.size(0),
              "fused_forward: residual shape does not match the output");
  const auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat).contiguous(); };
  // GEMM + bias in the input's dtype, as eager does it; the epilogue in float.
  auto h = f32(at::addmm(bias, x.reshape({-1, x.size(-1)}), weight.t()));
  const auto rows = dtype == at::kFloat      ? epilogue_rows<float>
                    : dtype == at::kBFloat16 ? epilogue_rows<c10::BFloat16>
                                             : epilogue_rows<c10::Half>;
  rows(h, f32(residual), f32(gamma), f32(beta), eps);
  return h.view(residual.sizes()).to(dtype);
}
"""

_ext = load_inline(name="kb_cpp_gemm_bias_add_ln", cpp_sources=CPP_SOURCE,
                   functions=["fused_forward"], extra_cflags=["-O3", "-fopenmp"],
                   extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int = 768, eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.fused_forward(x, self.dense.weight, self.dense.bias, residual,
                                  self.norm.weight, self.norm.bias, self.norm.eps)
