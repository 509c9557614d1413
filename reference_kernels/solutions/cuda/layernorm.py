"""BERT LayerNorm(768): a warp per row, the row in registers (16-byte loads/stores), two-pass
statistics by warp shuffles, fp32 math, output in the input's type; x read once uncached, out
stored streaming. fp32: 8 rows per block at 4 blocks per SM; bf16/fp16: a resident grid whose
warps stride over rows, loading the next row early. Other widths and dtypes fall back to PyTorch.
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

// LayerNorm over 768-wide rows, a warp per row, the row in registers as 16-byte vectors
// (vector c*32 + lane), two-pass statistics (mean, then mean squared deviation) by warp
// shuffles, fp32 math, output rounded once. x is read once (non-coherent, no L1 allocation)
// and out written once (streaming stores); gamma/beta, read by every row, go through L1.
// fp32: 8 rows per block, registers capped for 4 blocks per SM (more rows in flight);
// bf16/fp16: a grid of resident blocks whose warps stride over rows, each loading its next
// row before reducing the current one.
namespace kbl {
constexpr int kHidden = 768;

__device__ __forceinline__ uint4 ld_nc16(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ void st_cs16(uint4* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

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

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// One row held by a warp as C 16-byte vectors per lane (vector c*32 + lane): normalised in
// place, two-pass statistics by shuffles, gamma/beta read through L1.
template <typename T, int C>
__device__ __forceinline__ void ln_warp_row(uint4 (&raw)[C], const T* __restrict__ gamma,
                                            const T* __restrict__ beta, float eps, int lane) {
  using P = Pack<T>;
  constexpr int E = P::E;
  float v[C][E];
#pragma unroll
  for (int c = 0; c < C; ++c) P::unpack(raw[c], v[c]);
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < E; ++e) s += v[c][e];
  const float mean = warp_sum(s) * (1.f / kHidden);
  float q = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int e = 0; e < E; ++e) q += (v[c][e] - mean) * (v[c][e] - mean);
  const float rstd = rsqrtf(warp_sum(q) * (1.f / kHidden) + eps);
  const uint4* g4 = reinterpret_cast<const uint4*>(gamma);
  const uint4* b4 = reinterpret_cast<const uint4*>(beta);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float ga[E], be[E];
    P::unpack(__ldg(g4 + c * 32 + lane), ga);
    P::unpack(__ldg(b4 + c * 32 + lane), be);
#pragma unroll
    for (int e = 0; e < E; ++e) v[c][e] = (v[c][e] - mean) * rstd * ga[e] + be[e];
    raw[c] = P::pack(v[c]);
  }
}

// A warp per row, WARPS rows per block, one row per warp; MINB > 0 caps the registers so that
// MINB blocks fit on an SM (more rows in flight).
template <typename T, int WARPS, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : 1) ln_warp(const T* __restrict__ x, const T* __restrict__ gamma,
                                                      const T* __restrict__ beta, T* __restrict__ out, int M, float eps) {
  constexpr int V = kHidden / Pack<T>::E, C = V / 32;
  const int lane = threadIdx.x & 31, row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const uint4* xr = reinterpret_cast<const uint4*>(x) + (size_t)row * V;
  uint4* orow = reinterpret_cast<uint4*>(out) + (size_t)row * V;
  uint4 raw[C];
#pragma unroll
  for (int c = 0; c < C; ++c) raw[c] = ld_nc16(xr + c * 32 + lane);
  ln_warp_row<T, C>(raw, gamma, beta, eps, lane);
#pragma unroll
  for (int c = 0; c < C; ++c) st_cs16(orow + c * 32 + lane, raw[c]);
}

// Resident warps loop over rows (stride = all warps of the grid), the next row's loads issued
// before the current row is reduced and stored.
template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) ln_persist(const T* __restrict__ x, const T* __restrict__ gamma,
                                                         const T* __restrict__ beta, T* __restrict__ out, int M, float eps) {
  constexpr int V = kHidden / Pack<T>::E, C = V / 32;
  const int lane = threadIdx.x & 31, stride = gridDim.x * WARPS;
  int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* ov = reinterpret_cast<uint4*>(out);
  uint4 nxt[C];
#pragma unroll
  for (int c = 0; c < C; ++c) nxt[c] = ld_nc16(xv + (size_t)row * V + c * 32 + lane);
  for (; row < M; row += stride) {
    uint4 raw[C];
#pragma unroll
    for (int c = 0; c < C; ++c) raw[c] = nxt[c];
    if (row + stride < M) {
#pragma unroll
      for (int c = 0; c < C; ++c) nxt[c] = ld_nc16(xv + (size_t)(row + stride) * V + c * 32 + lane);
    }
    ln_warp_row<T, C>(raw, gamma, beta, eps, lane);
#pragma unroll
    for (int c = 0; c < C; ++c) st_cs16(ov + (size_t)row * V + c * 32 + lane, raw[c]);
  }
}

inline int sm_count() {
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (sms < 1) sms = 1;
  }
  return sms;
}

// Blocks of `kernel` resident per SM (occupancy API, asked once per kernel).
template <typename K>
int resident(K kernel, int threads, int& cache) {
  if (!cache) {
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cache, kernel, threads, 0);
    if (cache < 1) cache = 1;
  }
  return cache;
}

template <typename T, int WARPS, int MINB>
cudaError_t launch_warp(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  ln_warp<T, WARPS, MINB><<<(M + WARPS - 1) / WARPS, WARPS * 32, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return cudaGetLastError();
}

// Any grid size is correct (warps stride over rows): the SM count cached from the first
// device only changes how many blocks run.
template <typename T, int WARPS>
cudaError_t launch_persist(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  static int cache = 0;
  const int res = resident(ln_persist<T, WARPS>, WARPS * 32, cache);
  int blocks = res * sm_count();
  const int need = (M + WARPS - 1) / WARPS;
  if (blocks > need) blocks = need;
  if (blocks < 1) blocks = 1;
  ln_persist<T, WARPS><<<blocks, WARPS * 32, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return cudaGetLastError();
}
}  // namespace kbl

// dtype: 0 fp32, 1 bf16, 2 fp16. x, gamma, beta, out: contiguous, 16-byte aligned, x != out.
cudaError_t launch_layernorm(int dtype, const void* x, const void* gamma, const void* beta, void* out, int M,
                             float eps, cudaStream_t stream) {
  using namespace kbl;
  if (dtype == 1) return launch_persist<__nv_bfloat16, 8>(x, gamma, beta, out, M, eps, stream);
  if (dtype == 2) return launch_persist<__half, 8>(x, gamma, beta, out, M, eps, stream);
  return launch_warp<float, 8, 4>(x, gamma, beta, out, M, eps, stream);
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t launch_layernorm(int dtype, const void* x, const void* gamma, const void* beta, void* out, int M,
                             float eps, cudaStream_t stream);

torch::Tensor layernorm_forward(torch::Tensor x, c10::optional<torch::Tensor> gamma,
                                c10::optional<torch::Tensor> beta, double eps) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf),
              "x: CUDA fp32, bf16 or fp16");
  TORCH_CHECK(x.size(-1) == 768, "rows of 768 only");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  // The kernel always scales and shifts: absent gamma / beta become ones / zeros.
  torch::Tensor gc, bc;
  if (gamma.has_value()) { TORCH_CHECK(gamma->scalar_type() == dt && gamma->numel() == 768, "gamma"); gc = gamma->contiguous(); }
  else gc = torch::ones({768}, xc.options());
  if (beta.has_value()) { TORCH_CHECK(beta->scalar_type() == dt && beta->numel() == 768, "beta"); bc = beta->contiguous(); }
  else bc = torch::zeros({768}, xc.options());
  auto out = torch::empty_like(xc);
  const int64_t M = xc.numel() / 768;
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  const cudaError_t err = launch_layernorm(dt == at::kBFloat16 ? 1 : dt == at::kHalf ? 2 : 0, xc.data_ptr(),
                                           gc.data_ptr(), bc.data_ptr(), out.data_ptr(), (int)M, (float)eps,
                                           c10::cuda::getCurrentCUDAStream());
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
