"""BERT LayerNorm(768): one warp per row, the row in registers (16-byte loads/stores),
two-pass statistics (mean, then mean squared deviation) by warp shuffles; fp32, bf16 and
fp16 (fp32 math, output in the input's type). Other widths and dtypes fall back to PyTorch.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
// ---- BEGIN generated from _parts/layernorm_epilogue.cuh: edit there, then run reference_kernels/generate.py ----
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// One warp per 768-wide row, everything in registers: v = act(y + b) + residual (each part
// optional), then a two-pass LayerNorm (mean, then mean squared deviation) by warp shuffles.
// 16-byte loads and stores; bf16 / fp16 round where eager PyTorch rounds (each op's output).
// out may be y (in place): a warp reads its whole row before it writes any of it.
namespace kbr {
constexpr int HIDDEN = 768, WARPS = 8;

template <typename T> struct Vec;
template <> struct Vec<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void load(const float* p, float* v) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  }
  static __device__ __forceinline__ void store(float* p, const float* v) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
  static __device__ __forceinline__ float round(float v) { return v; }
};
template <> struct Vec<__nv_bfloat16> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void load(const __nv_bfloat16* p, float* v) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x; v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, const float* v) {
    uint4 q;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = q;
  }
  static __device__ __forceinline__ float round(float v) { return __bfloat162float(__float2bfloat16(v)); }
};
template <> struct Vec<__half> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void load(const __half* p, float* v) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x; v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ void store(__half* p, const float* v) {
    uint4 q;
    __half2* h = reinterpret_cast<__half2*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = q;
  }
  static __device__ __forceinline__ float round(float v) { return __half2float(__float2half(v)); }
};

// GELU(v) = v/2 (1 + erf(v/sqrt2)), erf(t) = sign(t) (1 - 2^(-t q(|t|))) with q of degree 7
// fitted to -log2(erfc(t))/t on [0, 3.92] (beyond it erf rounds to 1 in fp32): |error| <=
// 1.1e-7 in fp32 (erff's own: 6e-8), 13 instructions against erff's ~27. GELU needs erf's
// absolute error (1 + erf), which 1 - 2^(...) keeps small near 0. On the H100, erff cost 3 us of
// this pass's 17.9 at 8192 x 768 bf16 (14.8 without GELU); GEMM + this pass went 73.0 -> 71.9 us
// with it, 69.6 with the dependent launch too (eager: 106.6). Its bf16 outputs were bit for bit
// erff's (8192 and 4096 rows: no element differed).
__device__ __forceinline__ float erf_fast(float v) {
  const float t = fminf(fabsf(v), 3.92f);
  float q = 4.535800326e-05f;
  q = fmaf(q, t, -4.455017333e-04f);
  q = fmaf(q, t, 1.489419723e-03f);
  q = fmaf(q, t, 7.746692281e-04f);
  q = fmaf(q, t, -2.825371735e-02f);
  q = fmaf(q, t, 1.484816372e-01f);
  q = fmaf(q, t, 9.184163809e-01f);
  q = fmaf(q, t, 1.627908587e+00f);
  return copysignf(1.f - exp2f(-q * t), v);
}
__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.f + erf_fast(v * 0.70710678118654752f)); }

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

template <typename T, bool GELU>
__global__ void __launch_bounds__(WARPS * 32, 3)
    bias_act_res_ln_kernel(const T* y, const T* __restrict__ bias, const T* __restrict__ res,
                           const T* __restrict__ gamma, const T* __restrict__ beta, T* out, int M, float eps) {
  using V = Vec<T>;
  constexpr int E = V::N, C = HIDDEN / (32 * E);  // elements per vector, vectors per lane
  const int lane = threadIdx.x & 31, row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const size_t base = (size_t)row * HIDDEN;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent (launch_bias_act_res_ln): this block may start while
  // the GEMM before it finishes; past the wait, all work before this kernel is complete.
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  float v[C][E];
#pragma unroll
  for (int c = 0; c < C; ++c) V::load(y + base + (c * 32 + lane) * E, v[c]);  // all loads first
  if (res) {
    float r[C][E];
#pragma unroll
    for (int c = 0; c < C; ++c) V::load(res + base + (c * 32 + lane) * E, r[c]);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float b[E];
      if (bias) V::load(bias + (c * 32 + lane) * E, b);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float x = bias ? V::round(v[c][e] + b[e]) : v[c][e];
        if (GELU) x = V::round(gelu_erf(x));
        v[c][e] = V::round(x + r[c][e]);
      }
    }
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < E; ++e) s += v[c][e];
  const float mean = warp_sum(s) * (1.f / HIDDEN);
  float q = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < E; ++e) q += (v[c][e] - mean) * (v[c][e] - mean);
  const float rstd = rsqrtf(warp_sum(q) * (1.f / HIDDEN) + eps);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float ga[E], be[E];
    if (gamma) V::load(gamma + (c * 32 + lane) * E, ga);
    if (beta) V::load(beta + (c * 32 + lane) * E, be);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float o = (v[c][e] - mean) * rstd;
      if (gamma) o *= ga[e];
      if (beta) o += be[e];
      v[c][e] = o;
    }
    V::store(out + base + (c * 32 + lane) * E, v[c]);
  }
}
}  // namespace kbr

// res == nullptr: plain LayerNorm of y (bias and GELU unused). gamma/beta may be null.
// dtype: kF32, kBF16 or kF16 (the tensors' element type).
enum KbDtype { kF32 = 0, kBF16 = 1, kF16 = 2 };
cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream) {
  using namespace kbr;
  // Hopper and later: a programmatic dependent launch, so that launching and scheduling this
  // kernel overlap the GEMM's last wave instead of following it (griddepcontrol.wait above).
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((M + WARPS - 1) / WARPS);
  cfg.blockDim = dim3(WARPS * 32);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = major >= 9 ? 1 : 0;
  cudaError_t err;
#define KBR_LAUNCH(T, G)                                                                                  \
  err = cudaLaunchKernelEx(&cfg, bias_act_res_ln_kernel<T, G>, static_cast<const T*>(y), static_cast<const T*>(b), \
                     static_cast<const T*>(res), static_cast<const T*>(gamma), static_cast<const T*>(beta),   \
                     static_cast<T*>(out), M, eps)
  if (dtype == kBF16) {
    if (gelu) KBR_LAUNCH(__nv_bfloat16, true); else KBR_LAUNCH(__nv_bfloat16, false);
  } else if (dtype == kF16) {
    if (gelu) KBR_LAUNCH(__half, true); else KBR_LAUNCH(__half, false);
  } else {
    if (gelu) KBR_LAUNCH(float, true); else KBR_LAUNCH(float, false);
  }
#undef KBR_LAUNCH
  return err != cudaSuccess ? err : cudaGetLastError();
}
// ---- END generated from _parts/layernorm_epilogue.cuh ----
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

torch::Tensor layernorm_forward(torch::Tensor x, c10::optional<torch::Tensor> gamma,
                                c10::optional<torch::Tensor> beta, double eps) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf),
              "x: CUDA fp32, bf16 or fp16");
  TORCH_CHECK(x.size(-1) == 768, "rows of 768 only");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  torch::Tensor gc, bc;
  if (gamma.has_value()) { TORCH_CHECK(gamma->scalar_type() == dt && gamma->numel() == 768, "gamma"); gc = gamma->contiguous(); }
  if (beta.has_value()) { TORCH_CHECK(beta->scalar_type() == dt && beta->numel() == 768, "beta"); bc = beta->contiguous(); }
  auto out = torch::empty_like(xc);
  const int64_t M = xc.numel() / 768;
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  const cudaError_t err = launch_bias_act_res_ln(dt == at::kBFloat16 ? 1 : dt == at::kHalf ? 2 : 0, false, xc.data_ptr(), nullptr, nullptr,
                                                 gc.defined() ? gc.data_ptr() : nullptr,
                                                 bc.defined() ? bc.data_ptr() : nullptr, out.data_ptr(), (int)M,
                                                 (float)eps, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "layernorm launch: ", cudaGetErrorString(err));
  return out;
}
"""

_ext = load_inline(
    name="kb_layernorm",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x):
        n = self.norm
        if x.is_cuda and x.dtype in (torch.float32, torch.bfloat16, torch.float16) and tuple(n.normalized_shape) == (768,):
            return _ext.layernorm_forward(x, n.weight, n.bias, n.eps)
        return F.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps)
