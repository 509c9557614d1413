"""CPU (C++) BERT FFN output with GELU y = LayerNorm(GELU(x W^T + b) + residual): the GEMM
with the bias folded in by at::addmm (in the input's dtype), then one fused epilogue pass
per row in float (at::parallel_for): GELU (erf by a branch-free rational approximation
within a few float ulps, so the loop vectorizes), residual add, two-pass mean/variance
(SIMD reductions), affine LayerNorm, in place. For bf16/fp16 the GELU output and the sum
are rounded to that dtype where eager PyTorch rounds them."""

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

// ---- BEGIN generated from _parts/cpu_rows.h: edit there, then run reference_kernels/generate.py ----
// One row in float, in the cache: vectorized loops (omp simd: SIMD reductions).
#include <cmath>
#include <type_traits>

// ---- BEGIN generated from _parts/cpu_math.h: edit there, then run reference_kernels/generate.py ----
// Float math with no branch, no table and no libm call, so that GCC vectorizes the loops
// around it (-O3 -march=native; -fno-trapping-math lets it if-convert the clamps).
#include <cstdint>

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

// Exact GELU: x/2 (1 + erf(x / sqrt 2)).
static inline float gelu_erf(float x) { return 0.5f * x * (1.f + erf_approx(x * 0.70710678118654752f)); }

// exp(x) = 2^n e^r, n = round(x log2 e) (by adding 1.5 * 2^23, whose low mantissa bits then
// hold n), r = x - n ln 2 in two steps (Cody-Waite), e^r by Cephes' degree-7 polynomial:
// relative error ~2e-7. x is clamped to [-87, 88], where 2^n stays a normal float.
static inline float exp_approx(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float shifted = x * 1.44269504088896341f + 12582912.f;
  const float n = shifted - 12582912.f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.f;
  int32_t bits;
  __builtin_memcpy(&bits, &shifted, 4);
  bits = (bits - 0x4B400000 + 127) << 23;  // 2^n
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return p * scale;
}
// ---- END generated from _parts/cpu_math.h ----


// out = (v - mean) / sqrt(var + eps) * gamma + beta, given sum = the sum of v: the variance is
// taken of the centred values (a second pass over v), which stays exact for large means.
// out may be v.
static inline void layernorm_row(const float* v, float* out, const float* __restrict gamma,
                                 const float* __restrict beta, int64_t n, float sum, float eps) {
  const float mean = sum / n;
  float sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) sq += (v[i] - mean) * (v[i] - mean);
  const float rstd = 1.f / std::sqrt(sq / n + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = (v[i] - mean) * rstd * gamma[i] + beta[i];
}

// v = softmax(v * scale): the scale is folded into the exponent (scale > 0).
static inline void softmax_row(float* __restrict v, int64_t n, float scale) {
  float m = v[0], sum = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += (v[i] = exp_approx((v[i] - m) * scale));
  const float inv = 1.f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

// softmax_row on each n-wide row of s (rows x n) of dtype T, in place: in float, through the
// scratch tmp (n floats) when T is narrower, each row rounded back to T once.
template <typename T>
static void softmax_rows(T* s, int64_t rows, int64_t n, float scale, float* tmp) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = s + r * n;
    if constexpr (std::is_same_v<T, float>) {
      softmax_row(row, n, scale);
    } else {
      for (int64_t i = 0; i < n; ++i) tmp[i] = float(row[i]);
      softmax_row(tmp, n, scale);
      for (int64_t i = 0; i < n; ++i) row[i] = T(tmp[i]);
    }
  }
}
// ---- END generated from _parts/cpu_rows.h ----

// Float rows of h (rows x n), in place: h = LayerNorm(GELU(h) + residual) * gamma + beta.
// T is the model's dtype: GELU's output and the sum are rounded to it where eager PyTorch
// stores them (a no-op for float).
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
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += (v[i] = float(T(float(T(gelu_erf(v[i]))) + add[i])));
      layernorm_row(v, v, gamma, beta, n, sum, eps);
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

# -march=native: the loops vectorize to this CPU's widest vectors (AVX2 + FMA here), as ATen's
# own kernels are; -fno-trapping-math lets GCC if-convert the clamps (values are unchanged).
_ext = load_inline(name="kb_cpp_gemm_bias_gelu_add_ln", cpp_sources=CPP_SOURCE,
                   functions=["fused_forward"],
                   extra_cflags=["-O3", "-march=native", "-fopenmp", "-fno-trapping-math"],
                   extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int = 768, intermediate_size: int = 3072, eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.fused_forward(x, self.dense.weight, self.dense.bias, residual,
                                  self.norm.weight, self.norm.bias, self.norm.eps)
