"""CPU (C++) BERT encoder layer. GEMMs by ATen in the input's dtype (q, k and v as one
at::addmm on the stacked weights; the attention GEMMs by at::matmul); everything between
them written out here in float, one row per task (at::parallel_for): the attention
softmax, the residual + LayerNorm epilogues (two-pass, SIMD reductions) and GELU (erf by
a branch-free rational approximation within a few float ulps, so the loop vectorizes).
For bf16/fp16 each intermediate is rounded where eager PyTorch rounds it."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Only the headers this code needs (no_implicit_headers), not all of torch/extension.h:
# the build takes a fraction of the time.
CPP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <algorithm>
#include <cmath>

using at::Tensor;

static Tensor f32(const Tensor& t) { return t.to(at::kFloat).contiguous(); }

// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in float beyond): the rational
// approximation Eigen and XLA use for float erf, |error| < 5e-7 in float arithmetic. No
// branch and no libm call, so the loops around it vectorize.
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

// softmax(scores * scale) over the last dim, in float, one row per task.
static Tensor softmax_rows(const Tensor& scores, float scale) {
  Tensor p = f32(scores);
  const int64_t n = p.size(-1);
  float* s = p.data_ptr<float>();
  at::parallel_for(0, p.numel() / n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* v = s + r * n;
      const float m = *std::max_element(v, v + n);
      float sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp((v[i] - m) * scale));
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) v[i] /= sum;
    }
  });
  return p;
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

static void gelu_inplace(Tensor& h) {
  float* v = h.data_ptr<float>();
  at::parallel_for(0, h.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i)
      v[i] = 0.5f * v[i] * (1.f + erf_approx(v[i] * float(M_SQRT1_2)));
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
  const Tensor heads = qkv.view({B, S, 3, num_heads, D}).permute({2, 0, 3, 1, 4});
  const Tensor scores = at::matmul(heads[0], heads[1].transpose(-2, -1));
  const Tensor probs = softmax_rows(scores, 1.0 / std::sqrt(double(D))).to(dtype);
  const Tensor context = at::matmul(probs, heads[2]).transpose(1, 2).reshape({B * S, H});
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

# -fno-trapping-math lets GCC if-convert erf's clamp and vectorize (values are unchanged).
_ext = load_inline(name="kb_cpp_encoder_layer", cpp_sources=CPP_SOURCE,
                   functions=["encoder_layer_forward"],
                   extra_cflags=["-O3", "-fopenmp", "-fno-trapping-math"],
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
