"""CPU (C++) exact GELU y = x/2 (1 + erf(x / sqrt 2)), elementwise in chunks across threads
(at::parallel_for). erf is a branch-free rational approximation (within a few float ulps),
so the loop vectorizes; std::erf would not. bf16/fp16 are computed in float and rounded
back once, as eager PyTorch does."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>

// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in float beyond): the rational
// approximation Eigen and XLA use for float erf, |error| < 5e-7 in float arithmetic.
static inline float erf_approx(float x) {
  x = x < -4.f ? -4.f : (x > 4.f ? 4.f : x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

// bf16/fp16 go through float copies: ATen's vectorized casts beat per-element conversion.
at::Tensor gelu_forward(const at::Tensor& x) {
  TORCH_CHECK(x.is_cpu() && x.is_floating_point(), "gelu_forward: CPU float tensors only");
  const auto xf = x.to(at::kFloat).contiguous();
  auto y = at::empty_like(xf);
  const float* in = xf.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, xf.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i)
      out[i] = 0.5f * in[i] * (1.f + erf_approx(in[i] * float(M_SQRT1_2)));
  });
  return y.to(x.scalar_type());
}
"""

# -fno-trapping-math lets GCC if-convert the clamp and vectorize (values are unchanged).
_ext = load_inline(name="kb_cpp_gelu", cpp_sources=CPP_SOURCE, functions=["gelu_forward"],
                   extra_cflags=["-O3", "-fopenmp", "-fno-trapping-math"],
                   extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_forward(x)
