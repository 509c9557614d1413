"""CPU (C++) attention softmax(q k^T * scale) v, fused per block of work so the scores never
leave the cache: the (batch, head) pairs are cut into tasks (a group of whole heads for short
sequences, a block of 64 query rows of one head for long ones), split across threads
(at::parallel_for); a task runs the scores GEMM into its thread's buffer (at::bmm_out, BLAS,
single-threaded inside the parallel region), the softmax in float on the rows there (scale
folded into the exponent, a vectorized exp), then the GEMM with v into its slice of the
output. GEMMs in the input's dtype; for bf16/fp16 the scores and the probabilities are
rounded to it where eager PyTorch rounds them."""

import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <algorithm>
#include <cmath>
#include <vector>

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

constexpr int64_t SCORE_FLOATS = 1 << 16;  // a task's scores: 256 KB of floats, in L2
constexpr int64_t ROW_BLOCK = 64;          // query rows per task when a head's scores exceed it

// q, k, v: (..., S, D) of one dtype; the result has q's shape.
at::Tensor attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             double scale) {
  TORCH_CHECK(q.is_cpu() && q.dim() >= 2, "attention_forward: CPU (..., seq, dim) tensors only");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "attention_forward: q, k, v differ");
  const int64_t S = q.size(-2), D = q.size(-1), BH = q.numel() / (S * D);
  const auto q3 = q.reshape({BH, S, D}).contiguous(), k3 = k.reshape({BH, S, D}).contiguous(),
             v3 = v.reshape({BH, S, D}).contiguous();
  auto out = at::empty({BH, S, D}, q.options());
  // A task: `heads` whole heads (rows == S), or `rows` query rows of one head.
  const int64_t heads = std::max<int64_t>(1, SCORE_FLOATS / (S * S));
  const int64_t rows = S * S <= SCORE_FLOATS ? S : std::min(S, ROW_BLOCK);
  const int64_t row_blocks = (S + rows - 1) / rows, head_groups = (BH + heads - 1) / heads;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "attention", [&] {
    at::parallel_for(0, head_groups * row_blocks, 1, [&](int64_t begin, int64_t end) {
      auto scores = at::empty({heads, rows, S}, q.options());
      std::vector<float> tmp(S);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t h0 = t / row_blocks * heads, h1 = std::min(BH, h0 + heads);
        const int64_t r0 = t % row_blocks * rows, r1 = std::min(S, r0 + rows);
        auto sc = scores.narrow(0, 0, h1 - h0).narrow(1, 0, r1 - r0);
        const auto qs = q3.slice(0, h0, h1).slice(1, r0, r1);
        at::bmm_out(sc, qs, k3.slice(0, h0, h1).transpose(1, 2));
        softmax_rows(sc.data_ptr<scalar_t>(), (h1 - h0) * (r1 - r0), S, float(scale), tmp.data());
        auto o = out.slice(0, h0, h1).slice(1, r0, r1);
        at::bmm_out(o, sc, v3.slice(0, h0, h1));
      }
    });
  });
  return out.view(q.sizes());
}
"""

# -march=native: the loops vectorize to this CPU's widest vectors (AVX2 + FMA here), as ATen's
# own kernels are; -fno-trapping-math lets GCC if-convert exp's clamp (values are unchanged).
_ext = load_inline(name="kb_cpp_softmax_attention", cpp_sources=CPP_SOURCE,
                   functions=["attention_forward"],
                   extra_cflags=["-O3", "-march=native", "-fopenmp", "-fno-trapping-math"],
                   extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _ext.attention_forward(q, k, v, 1.0 / math.sqrt(q.size(-1)))
