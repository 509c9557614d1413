"""CPU (C++) BERT encoder layer. GEMMs by ATen in the input's dtype (q, k and v as one
at::addmm on the stacked weights); the attention fused per (batch, head): its two GEMMs
(at::mm_out on strided views of the q|k|v output, no head copies) around a softmax on
the scores while they are in the cache; everything else written out here in float, one
row per task (at::parallel_for): the residual + LayerNorm epilogues (two-pass, SIMD
reductions) and GELU (erf by a branch-free rational approximation within a few float
ulps, so the loop vectorizes). For bf16/fp16 each intermediate is rounded where eager
PyTorch rounds it."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <algorithm>
#include <cmath>
#include <vector>

using at::Tensor;

static Tensor f32(const Tensor& t) { return t.to(at::kFloat).contiguous(); }

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

// context (B*S, H) = softmax(q k^T * scale) v for each (batch, head), q | k | v the column blocks
// of qkv (B*S, 3H): one (batch, head) per task (at::parallel_for), its scores in the thread's
// buffer (in the cache), the GEMMs by at::mm_out on strided views (BLAS, no copies).
template <typename T>
static void attention_heads(const Tensor& qkv, Tensor& context, int64_t S, int64_t num_heads,
                            float scale) {
  const int64_t H = context.size(1), D = H / num_heads, B = context.size(0) / S;
  at::parallel_for(0, B * num_heads, 1, [&](int64_t begin, int64_t end) {
    auto scores = at::empty({S, S}, qkv.options());
    std::vector<float> tmp(S);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / num_heads, col = t % num_heads * D;
      const Tensor rows = qkv.slice(0, b * S, (b + 1) * S);
      at::mm_out(scores, rows.slice(1, col, col + D), rows.slice(1, H + col, H + col + D).t());
      softmax_rows(scores.data_ptr<T>(), S, S, scale, tmp.data());
      auto out = context.slice(0, b * S, (b + 1) * S).slice(1, col, col + D);
      at::mm_out(out, scores, rows.slice(1, 2 * H + col, 2 * H + col + D));
    }
  });
}

// Float rows of h (rows x n), in place: h = LayerNorm(h + residual) * gamma + beta. T is the
// model's dtype: the sum is rounded to it where eager PyTorch stores it (a no-op for float).
template <typename T>
static void add_layernorm_rows(Tensor& ht, const Tensor& rt, const Tensor& gt, const Tensor& bt,
                               float eps) {
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
      for (int64_t i = 0; i < n; ++i) sum += (v[i] = float(T(v[i] + add[i])));
      layernorm_row(v, v, gamma, beta, n, sum, eps);
    }
  });
}

static void gelu_inplace(Tensor& h) {
  float* v = h.data_ptr<float>();
  at::parallel_for(0, h.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) v[i] = gelu_erf(v[i]);
  });
}

// x: (batch, seq, hidden); Linear weights as nn.Linear holds them, (out, in). The GEMMs run
// in x's dtype, as eager does; what lies between them runs in float, and is rounded back to
// x's dtype wherever eager stores an intermediate.
Tensor encoder_layer_forward(const Tensor& x, const Tensor& wq, const Tensor& bq, const Tensor& wk,
                             const Tensor& bk, const Tensor& wv, const Tensor& bv,
                             const Tensor& w_attn_out, const Tensor& b_attn_out, const Tensor& g1,
                             const Tensor& beta1, const Tensor& w_inter, const Tensor& b_inter,
                             const Tensor& w_out, const Tensor& b_out, const Tensor& g2,
                             const Tensor& beta2, int64_t num_heads, double eps) {
  const auto dtype = x.scalar_type();
  TORCH_CHECK(x.is_cpu() && x.dim() == 3, "encoder_layer_forward: CPU (batch, seq, hidden) only");
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "encoder_layer_forward: float32, bfloat16 or float16 only");
  const auto add_layernorm = dtype == at::kFloat      ? add_layernorm_rows<float>
                             : dtype == at::kBFloat16 ? add_layernorm_rows<c10::BFloat16>
                                                      : add_layernorm_rows<c10::Half>;
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2), D = H / num_heads;
  const Tensor x2 = x.reshape({B * S, H});
  // q | k | v in one GEMM: (B*S, 3H), seen as (3, B, heads, S, D).
  const Tensor qkv = at::addmm(at::cat({bq, bk, bv}), x2, at::cat({wq, wk, wv}).t());
  Tensor context = at::empty({B * S, H}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "attention", [&] {
    attention_heads<scalar_t>(qkv, context, S, num_heads, 1.f / std::sqrt(float(D)));
  });
  Tensor attention = f32(at::addmm(b_attn_out, context, w_attn_out.t()));
  add_layernorm(attention, f32(x2), f32(g1), f32(beta1), eps);
  attention = attention.to(dtype);
  Tensor inter = f32(at::addmm(b_inter, attention, w_inter.t()));
  gelu_inplace(inter);
  Tensor out = f32(at::addmm(b_out, inter.to(dtype), w_out.t()));
  add_layernorm(out, f32(attention), f32(g2), f32(beta2), eps);
  return out.view({B, S, H}).to(dtype);
}
"""

# -march=native: the loops vectorize to this CPU's widest vectors (AVX2 + FMA here), as ATen's
# own kernels are; -fno-trapping-math lets GCC if-convert the clamps (values are unchanged).
_ext = load_inline(name="kb_cpp_encoder_layer", cpp_sources=CPP_SOURCE,
                   functions=["encoder_layer_forward"],
                   extra_cflags=["-O3", "-march=native", "-fopenmp", "-fno-trapping-math"],
                   extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int = 768, num_heads: int = 12, intermediate_size: int = 3072,
                 eps: float = 1e-12):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.attention_dense = nn.Linear(hidden_size, hidden_size)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.output_dense = nn.Linear(intermediate_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        modules = (self.query, self.key, self.value, self.attention_dense, self.attention_norm,
                   self.intermediate, self.output_dense, self.output_norm)
        params = [t for m in modules for t in (m.weight, m.bias)]
        return _ext.encoder_layer_forward(hidden_states, *params, self.num_heads,
                                          self.attention_norm.eps)
