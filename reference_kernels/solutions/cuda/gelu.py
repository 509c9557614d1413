"""BERT GELU (exact, erf) on (B, S, 3072): a bandwidth-bound elementwise kernel with 16-byte
loads/stores in one pass; fp32 math, bf16 output rounded once. bf16 runs 4 vectors per thread
with a 13-instruction erf (its error is below bf16 rounding), fp32 one vector per thread with
erff (exact). Other dtypes fall back to PyTorch.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// Exact (erf) GELU, elementwise: 16-byte loads and stores, UNROLL vectors per thread all loaded
// before the first is used, one pass (no grid stride). Math in fp32; bf16 rounds once on the
// way out, as eager does. A scalar tail covers numel % vector width. Launch shape and erf per
// dtype (launch_gelu): bf16 256 x 4 with the 13-instruction erf, fp32 128 x 1 with erff.
namespace kbe {
enum { M_ERF = 0, M_POLY = 1 };

// ---- BEGIN generated from _parts/pack16.cuh: edit there, then run reference_kernels/generate.py ----
// 16 bytes <-> fp32 values: 4 floats, or 8 bf16 / fp16 widened to fp32.
template <typename T> struct Pack;
template <> struct Pack<float> {
  static constexpr int E = 4;
  static __device__ __forceinline__ void unpack(uint4 q, float* v) {
    v[0] = __uint_as_float(q.x); v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z); v[3] = __uint_as_float(q.w);
  }
  static __device__ __forceinline__ uint4 pack(const float* v) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
};
template <> struct Pack<__nv_bfloat16> {
  static constexpr int E = 8;
  static __device__ __forceinline__ void unpack(uint4 q, float* v) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x; v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float* v) {
    uint4 q;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    return q;
  }
};
template <> struct Pack<__half> {
  static constexpr int E = 8;
  static __device__ __forceinline__ void unpack(uint4 q, float* v) {
    const __half2* h = reinterpret_cast<const __half2*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x; v[2 * i + 1] = f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float* v) {
    uint4 q;
    __half2* h = reinterpret_cast<__half2*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    return q;
  }
};
// ---- END generated from _parts/pack16.cuh ----
__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// ---- BEGIN generated from _parts/erf_fast.cuh: edit there, then run reference_kernels/generate.py ----
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
// ---- END generated from _parts/erf_fast.cuh ----

template <int MATH>
__device__ __forceinline__ float act1(float v) {
  const float t = v * 0.70710678118654752f;
  return 0.5f * v * (1.f + (MATH == M_POLY ? erf_fast(t) : erff(t)));
}

template <typename T, int MATH>
__device__ __forceinline__ uint4 act_vec(uint4 q) {
  float v[Pack<T>::E];
  Pack<T>::unpack(q, v);
#pragma unroll
  for (int i = 0; i < Pack<T>::E; ++i) v[i] = act1<MATH>(v[i]);
  return Pack<T>::pack(v);
}

// The last n % E elements, one per thread of block 0.
template <typename T, int MATH>
__device__ __forceinline__ void ew_tail(const T* x, T* y, size_t n, size_t nvec) {
  constexpr int E = Pack<T>::E;
  if (blockIdx.x != 0) return;
  for (size_t i = nvec * E + threadIdx.x; i < n; i += blockDim.x)
    store1(y + i, act1<MATH>(load1(x + i)));
}

// One pass, no grid stride: each thread loads UNROLL vectors (all in flight) then stores them.
template <typename T, int THREADS, int UNROLL, int MATH>
__global__ void __launch_bounds__(THREADS) gelu_kernel(const T* __restrict__ x, T* __restrict__ y, size_t n) {
  const size_t nvec = n / Pack<T>::E, base = (size_t)blockIdx.x * THREADS * UNROLL + threadIdx.x;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  uint4 v[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (base + u * THREADS < nvec) v[u] = xv[base + u * THREADS];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (base + u * THREADS < nvec) yv[base + u * THREADS] = act_vec<T, MATH>(v[u]);
  ew_tail<T, MATH>(x, y, n, nvec);
}

template <typename T, int THREADS, int UNROLL, int MATH>
cudaError_t launch(const void* x, void* y, size_t n, cudaStream_t s) {
  const size_t per = (size_t)THREADS * UNROLL, vecs = n / Pack<T>::E;
  size_t blocks = (vecs + per - 1) / per;
  if (blocks == 0) blocks = 1;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  gelu_kernel<T, THREADS, UNROLL, MATH><<<(unsigned)blocks, THREADS, 0, s>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n);
  return cudaGetLastError();
}
}  // namespace kbe

// bf16: 256 threads x 4 vectors, polynomial erf (erff's instructions, not memory, bound it).
// fp32: 128 threads x 1 vector, erff (exact; fp32 is memory-bound, the polynomial gains nothing).
cudaError_t launch_gelu(bool bf16, const void* x, void* y, size_t n, cudaStream_t stream) {
  using namespace kbe;
  return bf16 ? launch<__nv_bfloat16, 256, 4, M_POLY>(x, y, n, stream) : launch<float, 128, 1, M_ERF>(x, y, n, stream);
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t launch_gelu(bool bf16, const void* x, void* y, size_t n, cudaStream_t stream);

torch::Tensor gelu_forward(torch::Tensor x) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16), "x: CUDA fp32 or bf16");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const cudaError_t err = launch_gelu(dt == at::kBFloat16, xc.data_ptr(), y.data_ptr(), (size_t)xc.numel(),
                                      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "gelu launch: ", cudaGetErrorString(err));
  return y;
}
"""

_ext = load_inline(
    name="kb_gelu",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["gelu_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.is_cuda and x.dtype in (torch.float32, torch.bfloat16):
            return _ext.gelu_forward(x)
        return F.gelu(x)
