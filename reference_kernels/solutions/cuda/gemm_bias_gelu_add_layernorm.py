"""BERT FFN output with GELU: y = LayerNorm(GELU(dense(x)) + residual) in TWO launches.
Our own kernels for fp32 and bf16.

Launch 1, our GEMM: 128 x 192 block tiles, 8 warps of 64 x 48, a 4-stage cp.async ring of
swizzled 128-byte smem rows (16-byte copies, conflict-free fragment loads); fp32 uses
3xTF32 split precision (a = hi + lo; hi*hi + hi*lo + lo*hi on mma.m16n8k8 tensor cores),
which keeps fp32 accuracy; bf16 uses mma.m16n8k16 with ldmatrix. Its epilogue, in registers: bias, exact-erf GELU,
residual; the tile is stored once. Launch 2: LayerNorm, one warp per 768-wide row in
registers (16-byte loads, warp-shuffle two-pass statistics). bf16 rounds where eager rounds.
PyTorch eager: 4 (addmm with bias, gelu, add, layer_norm) launches.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#define KB_ONLY_EPI 2
// ---- BEGIN generated from _parts/gemm_core.cuh: edit there, then run reference_kernels/generate.py ----
// ---- tiled tensor-core GEMM core: acc[BM x BN] = A[m0:m0+BM, :] . W[n0:n0+BN, :]^T ----
// A is [M, K] row-major, W is [N, K] row-major (nn.Linear's weight), both K-contiguous.
// fp32: 3xTF32 split precision on mma.m16n8k8 (a = hi + lo; hi*hi + hi*lo + lo*hi), which
// keeps fp32 accuracy; bf16: mma.m16n8k16 with ldmatrix. Shared memory holds one k-tile as
// 128-byte rows (32 fp32 or 64 bf16 per row), filled by cp.async in a STAGES-deep ring.
// Then the GEMM kernel with its epilogue in registers, and launch_gemm_epilogue(); a file that
// needs one epilogue #defines KB_ONLY_EPI to it first, so only that one is compiled.
#include <cuda_bf16.h>
#include <stdint.h>
#include <cuda_runtime.h>

namespace kbg {
constexpr int BM = 128, BN = 192;           // block tile; 768 = 4 x 192
constexpr int THREADS = 256;                // 8 warps as 2 (M) x 4 (N)
constexpr int WM = 64, WN = 48;             // warp tile
constexpr int MT = WM / 16, NT = WN / 8;    // mma tiles per warp: 4 x 6
constexpr int ROWB = 128;                   // bytes of one smem row of a k-tile
constexpr int STAGES = 4;
constexpr int STAGE_BYTES = (BM + BN) * ROWB;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;  // 160 KB

// Byte offset of 16-byte chunk c (0..7) of smem row r. The XOR keeps both access
// patterns conflict-free: ldmatrix (8 rows, same chunk) and the fp32 float2 fragment
// loads (a half-warp reads 4 rows x 2 neighbouring chunks).
__device__ __forceinline__ int swz(int r, int c) {
  return r * ROWB + ((c ^ (((r & 3) << 1) | ((r >> 2) & 1))) << 4);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// ---- BEGIN generated from _parts/ptx_mma.cuh: edit there, then run reference_kernels/generate.py ----
// PTX wrappers shared by the tensor-core kernels (GEMM core, softmax attention), spliced into
// each one's namespace: cp.async groups, the 3xTF32 split, mma.sync on tf32 and bf16.
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  const uint32_t h = __float_as_uint(x) & 0xffffe000u;  // x truncated to tf32
  const float l = x - __uint_as_float(h);              // exact remainder
  uint32_t lr;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lr) : "f"(l));
  hi = h;
  lo = lr;
}

__device__ __forceinline__ void mma_tf32(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// ---- END generated from _parts/ptx_mma.cuh ----

template <typename T>
__device__ __forceinline__ void load_tile(uint32_t s, const T* __restrict__ A, const T* __restrict__ W,
                                          int m0, int n0, int M, int K, int k0, int tid) {
  constexpr int EPC = 16 / sizeof(T);  // elements per 16-byte chunk
#pragma unroll
  for (int i = 0; i < BM * 8 / THREADS; ++i) {
    const int id = tid + i * THREADS, r = id >> 3, c = id & 7;
    const bool ok = m0 + r < M;  // rows past M are zero-filled
    const T* src = A + (size_t)(ok ? m0 + r : 0) * K + k0 + c * EPC;
    cp_async16(s + swz(r, c), src, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < BN * 8 / THREADS; ++i) {
    const int id = tid + i * THREADS, r = id >> 3, c = id & 7;
    cp_async16(s + BM * ROWB + swz(r, c), W + (size_t)(n0 + r) * K + k0 + c * EPC, 16);
  }
}

// d = a . b (a zero accumulator in)
__device__ __forceinline__ void mma_tf32_c0(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One k-tile (32 fp32) of 3xTF32 mma. k is permuted inside each k8 step (thread t holds
// k = 2t, 2t+1 as its "t" and "t+4"), identically for A and B, so one float2 load
// fetches both halves of a fragment. B's 6 fragments are split once per k8 step, A's one
// m-tile at a time (fewer live registers).
__device__ __forceinline__ void compute_tile(const char* sA, const char* sB, float (&acc)[MT][NT][4],
                                             int wm, int wn, int lane, float) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int s = 0; s < 4; ++s) {
    const int c = 2 * s + (t >> 1), off = (t & 1) * 8;
    uint32_t bhi[NT][2], blo[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float2 w = *reinterpret_cast<const float2*>(sB + swz(wn * WN + j * 8 + g, c) + off);
      split_tf32(w.x, bhi[j][0], blo[j][0]);
      split_tf32(w.y, bhi[j][1], blo[j][1]);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int r = wm * WM + i * 16 + g;
      const float2 v0 = *reinterpret_cast<const float2*>(sA + swz(r, c) + off);
      const float2 v1 = *reinterpret_cast<const float2*>(sA + swz(r + 8, c) + off);
      uint32_t ahi[4], alo[4];
      split_tf32(v0.x, ahi[0], alo[0]);
      split_tf32(v1.x, ahi[1], alo[1]);
      split_tf32(v0.y, ahi[2], alo[2]);
      split_tf32(v1.y, ahi[3], alo[3]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // The tensor core's fp32 accumulation truncates (rounds toward zero) relative to the
        // accumulator's magnitude; summed over K = 3072 (1152 mmas into one accumulator) that
        // bias reached 8e-5. So each k8 step's three products (small terms first) go into a
        // fresh partial p, added to acc by a correctly rounded FADD: error back near fp32's.
        float p[4];
        mma_tf32_c0(p, alo, bhi[j]);
        mma_tf32(p, ahi, blo[j]);
        mma_tf32(p, ahi, bhi[j]);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += p[e];
      }
    }
  }
}

// One k-tile (64 bf16) of bf16 mma, fragments through ldmatrix.
__device__ __forceinline__ void compute_tile(const char* sA, const char* sB, float (&acc)[MT][NT][4],
                                             int wm, int wn, int lane, __nv_bfloat16) {
  const uint32_t a0 = (uint32_t)__cvta_generic_to_shared(sA);
  const uint32_t b0 = (uint32_t)__cvta_generic_to_shared(sB);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t a[MT][4], b[NT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
      ldmatrix_x4(a[i], a0 + swz(wm * WM + i * 16 + (lane & 15), 2 * s + (lane >> 4)));
#pragma unroll
    for (int jj = 0; jj < NT / 2; ++jj) {
      uint32_t r[4];
      ldmatrix_x4(r, b0 + swz(wn * WN + jj * 16 + (lane & 7) + ((lane >> 4) << 3),
                              2 * s + ((lane >> 3) & 1)));
      b[2 * jj][0] = r[0];
      b[2 * jj][1] = r[1];
      b[2 * jj + 1][0] = r[2];
      b[2 * jj + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_bf16(acc[i][j], a[i], b[j]);
  }
}

// The block's whole K loop. acc element (i, j, e) sits at tile row wm*64 + i*16 + g + 8*(e>>1),
// tile column wn*48 + j*8 + 2t + (e&1), with g = lane/4, t = lane%4.
template <typename T>
__device__ __forceinline__ void gemm_mainloop(const T* __restrict__ A, const T* __restrict__ W, int m0,
                                              int n0, int M, int K, char* smem, float (&acc)[MT][NT][4]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
  constexpr int BK = ROWB / sizeof(T);
  const int KT = K / BK;
  const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(smem);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_tile<T>(s0 + s * STAGE_BYTES, A, W, m0, n0, M, K, s * BK, tid);
    cp_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // tile kt landed for all threads; slot (kt-1)%STAGES is free again
    const int nk = kt + STAGES - 1;
    if (nk < KT) load_tile<T>(s0 + (nk % STAGES) * STAGE_BYTES, A, W, m0, n0, M, K, nk * BK, tid);
    cp_commit();
    const char* st = smem + (kt % STAGES) * STAGE_BYTES;
    compute_tile(st, st + BM * ROWB, acc, wm, wn, lane, T());
  }
  cp_wait<0>();
}

// bf16 runs round where PyTorch's eager bf16 ops round (each op's output), fp32 never.
__device__ __forceinline__ float round_as(float v, float) { return v; }
__device__ __forceinline__ float round_as(float v, __nv_bfloat16) {
  return __bfloat162float(__float2bfloat16(v));
}
__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
}  // namespace kbg
using namespace kbg;

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// y[M, N] = epi(x[M, K] . W[N, K]^T) on tensor cores (3xTF32 for fp32, bf16 mma for bf16),
// the epilogue applied to the accumulators in registers before the tile is stored once:
// EPI 0: + b;  1: + b + res;  2: GELU(+ b) + res (res is [M, N]). bf16 rounds after each
// op as eager does, so the stored tensor is eager's intermediate.
template <typename T, int EPI>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_epilogue_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                         const T* __restrict__ res, T* __restrict__ y, int M, int N, int K) {
  extern __shared__ __align__(128) char smem[];
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  float acc[MT][NT][4];
  gemm_mainloop<T>(x, w, m0, n0, M, K, smem, acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp >> 2, wn = warp & 3;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + wn * WN + j * 8 + 2 * t;
    const float2 b = bias ? load2(bias + col) : make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * WM + i * 16 + h * 8 + g;
        if (row >= M) continue;
        float v0 = acc[i][j][2 * h] + b.x, v1 = acc[i][j][2 * h + 1] + b.y;
        if (EPI >= 1) {
          v0 = round_as(v0, T());
          v1 = round_as(v1, T());
          if (EPI == 2) {
            v0 = round_as(gelu_erf(v0), T());
            v1 = round_as(gelu_erf(v1), T());
          }
          const float2 r = load2(res + (size_t)row * N + col);
          v0 += r.x;
          v1 += r.y;
        }
        store2(y + (size_t)row * N + col, v0, v1);
      }
  }
}

template <typename T, int EPI>
static cudaError_t launch_t(const void* x, const void* w, const void* b, const void* res, void* y, int M, int N,
                            int K, cudaStream_t stream) {
  auto kernel = gemm_epilogue_kernel<T, EPI>;
  static cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (configured != cudaSuccess) return configured;
  const dim3 grid(N / BN, (M + BM - 1) / BM);  // x fastest: the blocks of one row panel run together
  kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                static_cast<const T*>(b), static_cast<const T*>(res),
                                                static_cast<T*>(y), M, N, K);
  return cudaGetLastError();
}

// epi: 0 = bias, 1 = bias + residual, 2 = GELU(bias) + residual; N % 192 == 0, K % k-tile == 0.
cudaError_t launch_gemm_epilogue(bool bf16, int epi, const void* x, const void* w, const void* b, const void* res,
                                 void* y, int M, int N, int K, cudaStream_t stream) {
#ifdef KB_ONLY_EPI  // a file that needs one epilogue compiles only that one
  if (epi != KB_ONLY_EPI) return cudaErrorInvalidValue;
  return bf16 ? launch_t<__nv_bfloat16, KB_ONLY_EPI>(x, w, b, res, y, M, N, K, stream)
              : launch_t<float, KB_ONLY_EPI>(x, w, b, res, y, M, N, K, stream);
#else
  if (bf16) {
    if (epi == 1) return launch_t<__nv_bfloat16, 1>(x, w, b, res, y, M, N, K, stream);
    if (epi == 2) return launch_t<__nv_bfloat16, 2>(x, w, b, res, y, M, N, K, stream);
    return launch_t<__nv_bfloat16, 0>(x, w, b, res, y, M, N, K, stream);
  }
  if (epi == 1) return launch_t<float, 1>(x, w, b, res, y, M, N, K, stream);
  if (epi == 2) return launch_t<float, 2>(x, w, b, res, y, M, N, K, stream);
  return launch_t<float, 0>(x, w, b, res, y, M, N, K, stream);
#endif
}
// ---- END generated from _parts/gemm_core.cuh ----
// ---- BEGIN generated from _parts/layernorm_epilogue.cuh: edit there, then run reference_kernels/generate.py ----
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// One warp per 768-wide row, everything in registers: v = act(y + b) + residual (each part
// optional), then a two-pass LayerNorm (mean, then mean squared deviation) by warp shuffles.
// 16-byte loads and stores; bf16 rounds where eager PyTorch rounds (each op's output).
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

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

template <typename T, bool GELU>
__global__ void __launch_bounds__(WARPS * 32, 3)
    bias_act_res_ln_kernel(const T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ res,
                           const T* __restrict__ gamma, const T* __restrict__ beta, T* __restrict__ out, int M,
                           float eps) {
  using V = Vec<T>;
  constexpr int E = V::N, C = HIDDEN / (32 * E);  // elements per vector, vectors per lane
  const int lane = threadIdx.x & 31, row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const size_t base = (size_t)row * HIDDEN;
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
cudaError_t launch_bias_act_res_ln(bool bf16, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream) {
  using namespace kbr;
  const int blocks = (M + WARPS - 1) / WARPS;
#define KBR_LAUNCH(T, G)                                                                                  \
  bias_act_res_ln_kernel<T, G><<<blocks, WARPS * 32, 0, stream>>>(                                       \
      static_cast<const T*>(y), static_cast<const T*>(b), static_cast<const T*>(res),                  \
      static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(out), M, eps)
  if (bf16) {
    if (gelu) KBR_LAUNCH(__nv_bfloat16, true); else KBR_LAUNCH(__nv_bfloat16, false);
  } else {
    if (gelu) KBR_LAUNCH(float, true); else KBR_LAUNCH(float, false);
  }
#undef KBR_LAUNCH
  return cudaGetLastError();
}
// ---- END generated from _parts/layernorm_epilogue.cuh ----
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

constexpr int kEpi = 2;  // the GEMM epilogue, as KB_ONLY_EPI above: GELU(bias) + residual
constexpr const char* kName = "kb_gemm_bias_gelu_add_ln";
// ---- BEGIN generated from _parts/fused_forward.cpp: edit there, then run reference_kernels/generate.py ----
// Host side of the GEMM + LayerNorm twins; the file sets kEpi (launch_gemm_epilogue's epi:
// 1 = bias + residual, 2 = GELU(bias) + residual) and kName (its extension, for errors) first.
cudaError_t launch_gemm_epilogue(bool bf16, int epi, const void* x, const void* w, const void* b, const void* res,
                                 void* y, int M, int N, int K, cudaStream_t stream);
cudaError_t launch_bias_act_res_ln(bool bf16, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

constexpr bool kBf16Cublas = false;  // bf16: cuBLAS GEMM + our fused epilogue instead

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                            torch::Tensor gamma, torch::Tensor beta, double eps) {
  const auto dt = x.scalar_type();
  const bool bf16 = dt == at::kBFloat16;
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || bf16), "x: CUDA fp32 or bf16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(K % (128 / x.element_size()) == 0, "K must be a multiple of ", 128 / x.element_size());
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  auto x2 = x.reshape({-1, K}).contiguous();
  auto wc = w.contiguous(), bc = b.contiguous(), rc = res.contiguous(), gc = gamma.contiguous(),
       ec = beta.contiguous();
  auto out = torch::empty(res.sizes(), res.options());
  const int64_t M = x2.size(0);
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  cudaError_t err;
  if (bf16 && kBf16Cublas) {
    auto y = at::addmm(bc, x2, wc.t());  // the call eager makes: same rounding
    err = launch_bias_act_res_ln(true, kEpi == 2, y.data_ptr(), nullptr, rc.data_ptr(), gc.data_ptr(),
                                 ec.data_ptr(), out.data_ptr(), (int)M, (float)eps, stream);
  } else {
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(wc.data_ptr()) % 16 == 0, "x and weight must be 16-byte aligned");
    auto v = torch::empty({M, N}, x.options());  // act(x W^T + b) + residual
    err = launch_gemm_epilogue(bf16, kEpi, x2.data_ptr(), wc.data_ptr(), bc.data_ptr(), rc.data_ptr(), v.data_ptr(),
                               (int)M, (int)N, (int)K, stream);
    if (err == cudaSuccess)
      err = launch_bias_act_res_ln(bf16, false, v.data_ptr(), nullptr, nullptr, gc.data_ptr(), ec.data_ptr(),
                                   out.data_ptr(), (int)M, (float)eps, stream);
  }
  TORCH_CHECK(err == cudaSuccess, kName, " launch: ", cudaGetErrorString(err));
  return out;
}
// ---- END generated from _parts/fused_forward.cpp ----
"""

_ext = load_inline(
    name="kb_gemm_bias_gelu_add_ln",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["fused_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x, residual):
        if x.is_cuda and x.dtype in (torch.float32, torch.bfloat16):
            return _ext.fused_forward(x, self.dense.weight, self.dense.bias, residual, self.norm.weight,
                                      self.norm.bias, self.norm.eps)
        return self.norm(torch.nn.functional.gelu(self.dense(x)) + residual)  # other dtypes/devices: plain PyTorch
