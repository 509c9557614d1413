"""BERT attention output (BertSelfOutput): y = LayerNorm(dense(x) + residual) in TWO launches.
The path is picked at run time by dtype, in this one file.

fp32, our GEMM: 128 x 192 block tiles, 8 warps of 64 x 48, a 4-stage cp.async ring of
swizzled 128-byte smem rows (16-byte copies, conflict-free fragment loads), 3xTF32 split
precision (a = hi + lo; hi*hi + hi*lo + lo*hi on mma.m16n8k8 tensor cores), which keeps
fp32 accuracy. Its epilogue, in registers: bias, residual; the tile is stored once. Launch 2:
LayerNorm, one warp per 768-wide row in registers (16-byte loads, warp-shuffle two-pass
statistics).

bf16 / fp16: cuBLASLt's GEMM with its bias epilogue (on Hopper its wgmma + TMA kernels),
called with the algorithm chosen once per shape (at::addmm asks cuBLASLt's heuristic on
every call: ~25 us of host time on the H100 machine), then ONE kernel for residual and
LayerNorm. Rounds where eager rounds. PyTorch eager: 3 (addmm with bias, add, layer_norm) launches.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#define KB_ONLY_EPI 1
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

constexpr int kEpi = 1;  // the GEMM epilogue, as KB_ONLY_EPI above: bias + residual
constexpr const char* kName = "kb_gemm_bias_add_ln";
// ---- BEGIN generated from _parts/fused_forward.cpp: edit there, then run reference_kernels/generate.py ----
// Host side of the GEMM + LayerNorm twins; the file sets kEpi (launch_gemm_epilogue's epi:
// 1 = bias + residual, 2 = GELU(bias) + residual) and kName (its extension, for errors) first.
// Picked at run time by dtype: fp32 runs our 3xTF32 GEMM with the epilogue in its tile, then
// LayerNorm; bf16 / fp16 run cuBLASLt's GEMM with its bias epilogue (wgmma + TMA kernels on
// Hopper, the architecture's own on other GPUs: our mma.sync bf16 GEMM reached 28-56 % of it),
// then one kernel for GELU, residual and LayerNorm.
// ---- BEGIN generated from _parts/cublaslt_linear.cpp: edit there, then run reference_kernels/generate.py ----
// y[M, N] = x[M, K] W[N, K]^T + b for bf16 / fp16: one cuBLASLt call with its bias epilogue,
// the kernel eager's F.linear runs (same tile choice, same single rounding of the biased
// sum), with everything but the call itself set up once. These forwards are paced by the
// host (the GPU needs 17-70 us, a launch sequence on the H100 machine's CPU 60-130 us), so
// host time is time: per call at::addmm asked cuBLASLt's heuristic (its host side took
// 24 us, the matmul alone 12.6 us), torch's handle and workspace getters took 5.8 us more.
// The extension links -lcublasLt (the CUDA toolkit's; torch has loaded the same library).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

namespace kblt {

// The tensors' element type as launch_bias_act_res_ln takes it (layernorm_epilogue.cuh's KbDtype).
inline int kb_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? 1 : t == at::kHalf ? 2 : 0;
}

inline void check(cublasStatus_t s, const char* what) {
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuBLASLt ", what, ": status ", static_cast<int>(s));
}

constexpr size_t kWorkspace = 32 << 20;  // what torch gives cuBLASLt on Hopper

struct Plan {  // one (M, N, K, dtype, device): descriptors and algorithm, kept for the process
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
};

// Row-major y = x W^T is column-major y^T[N, M] = W^T (W as a K x N column-major matrix,
// transposed) times x^T (K x M): cuBLAS's "TN" product, bias per output feature (row of y^T).
inline Plan make_plan(int64_t M, int64_t N, int64_t K, cudaDataType_t t) {
  Plan p;
  check(cublasLtCreate(&p.handle), "handle");
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t trans = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)), "transb");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
        "bias epilogue");
  check(cublasLtMatrixLayoutCreate(&p.a, t, K, N, K), "W layout");
  check(cublasLtMatrixLayoutCreate(&p.b, t, K, M, K), "x layout");
  check(cublasLtMatrixLayoutCreate(&p.d, t, N, M, N), "y layout");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                             sizeof(kWorkspace)), "workspace preference");
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(p.handle, p.op, p.a, p.b, p.d, p.d, pref, 1, &best, &found), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  TORCH_CHECK(found > 0, "cuBLASLt has no algorithm for ", M, "x", N, "x", K);
  p.algo = best.algo;
  return p;
}

// Whether `linear_into` takes these operands: bf16 / fp16, contiguous, 16-byte aligned (the
// plan's kernel was chosen for aligned operands). Otherwise the caller uses at::addmm_out.
inline bool fast(const torch::Tensor& t) {
  return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}
inline bool takes(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const auto dt = x.scalar_type();
  return (dt == at::kBFloat16 || dt == at::kHalf) && fast(x) && fast(w) && fast(b);
}

// y (M x N, contiguous, on the current device) = x W^T + b, on the current stream.
inline void linear_into(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, torch::Tensor& y,
                        int64_t M, int64_t K) {
  const int64_t N = w.size(0);
  if (M == 0) return;
  const auto dt = x.scalar_type();
  const int device = x.get_device();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, Plan> plans;
  // One workspace per stream: two streams must not share one while their GEMMs run.
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::lock_guard<std::mutex> lock(mu);  // the descriptor's bias pointer is shared state
  auto it = plans.find({M, N, K, static_cast<int>(dt), device});
  if (it == plans.end())
    it = plans.emplace(std::make_tuple(M, N, K, static_cast<int>(dt), device),
                       make_plan(M, N, K, dt == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F)).first;
  void*& workspace = workspaces[{device, stream}];
  if (workspace == nullptr) workspace = c10::cuda::CUDACachingAllocator::raw_alloc(kWorkspace);
  Plan& plan = it->second;
  const void* bias = b.data_ptr();
  check(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        "bias pointer");
  const float one = 1.f, zero = 0.f;
  check(cublasLtMatmul(plan.handle, plan.op, &one, w.data_ptr(), plan.a, x.data_ptr(), plan.b, &zero, y.data_ptr(),
                       plan.d, y.data_ptr(), plan.d, &plan.algo, workspace, kWorkspace, stream),
        "matmul");
}

}  // namespace kblt
// ---- END generated from _parts/cublaslt_linear.cpp ----
cudaError_t launch_gemm_epilogue(bool bf16, int epi, const void* x, const void* w, const void* b, const void* res,
                                 void* y, int M, int N, int K, cudaStream_t stream);
cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                            torch::Tensor gamma, torch::Tensor beta, double eps) {
  const auto dt = x.scalar_type();
  const bool half = dt == at::kBFloat16 || dt == at::kHalf;
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || half), "x: CUDA fp32, bf16 or fp16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(half || K % 32 == 0, "fp32: K must be a multiple of 32");
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  auto rc = res.contiguous(), gc = gamma.contiguous(), ec = beta.contiguous();
  // One buffer: the GEMM writes its tile there and LayerNorm rewrites it in place (each warp
  // reads its whole row before writing it). An allocation is 4.3 us of host time here.
  auto out = torch::empty(res.sizes(), res.options());
  const int64_t M = x.numel() / K;
  if (M == 0) return out;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  auto out2 = out.view({M, N});
  cudaError_t err;
  if (half) {  // x W^T + b, rounded once as eager rounds it
    if (kblt::takes(x, w, b))
      kblt::linear_into(x, w, b, out2, M, K);
    else
      at::addmm_out(out2, b, x.reshape({M, K}), w.t());
    err = launch_bias_act_res_ln(kblt::kb_dtype(dt), kEpi == 2, out.data_ptr(), nullptr, rc.data_ptr(),
                                 gc.data_ptr(), ec.data_ptr(), out.data_ptr(), (int)M, (float)eps, stream);
  } else {
    auto x2 = x.reshape({M, K}).contiguous();
    auto wc = w.contiguous(), bc = b.contiguous();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(wc.data_ptr()) % 16 == 0, "x and weight must be 16-byte aligned");
    err = launch_gemm_epilogue(false, kEpi, x2.data_ptr(), wc.data_ptr(), bc.data_ptr(), rc.data_ptr(),
                               out.data_ptr(), (int)M, (int)N, (int)K, stream);  // act(x W^T + b) + residual
    if (err == cudaSuccess)
      err = launch_bias_act_res_ln(0, false, out.data_ptr(), nullptr, nullptr, gc.data_ptr(), ec.data_ptr(),
                                   out.data_ptr(), (int)M, (float)eps, stream);
  }
  TORCH_CHECK(err == cudaSuccess, kName, " launch: ", cudaGetErrorString(err));
  return out;
}
// ---- END generated from _parts/fused_forward.cpp ----
"""

_ext = load_inline(
    name="kb_gemm_bias_add_ln",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["fused_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    extra_ldflags=["-lcublasLt"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x, residual):
        if x.is_cuda and x.dtype in (torch.float32, torch.bfloat16, torch.float16):
            # Plain dict lookups: nn.Module's __getattr__ took ~0.8 us a lookup on the H100
            # machine's CPU, and at BERT's sizes this forward's time is mostly host time.
            dense, norm = self._modules["dense"]._parameters, self._modules["norm"]
            ln = norm._parameters
            return _ext.fused_forward(x, dense["weight"], dense["bias"], residual, ln["weight"], ln["bias"], norm.eps)
        return self.norm(self.dense(x) + residual)  # other dtypes/devices: plain PyTorch
