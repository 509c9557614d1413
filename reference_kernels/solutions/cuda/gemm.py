"""BERT Linear (768->768 and 3072->768): y = x . W^T + b. fp32: our own tensor-core GEMM;
bf16 / fp16: cuBLASLt's GEMM with its bias epilogue (the kernel eager runs), set up once per
shape so that each call is the matmul alone.

Our GEMM: 128 x 192 block tiles, 8 warps of 64 x 48, a 4-stage cp.async ring of swizzled
128-byte smem rows (16-byte copies, conflict-free fragment loads). fp32: 3xTF32 split
precision (a = hi + lo; hi*hi + hi*lo + lo*hi on mma.m16n8k8 tensor cores), fp32-accurate;
its bf16 path (mma.m16n8k16 with ldmatrix) is in the shared core but unused here. The bias is
added in registers before the single store. fp32 needs out_features % 192 == 0 and
in_features % 32 == 0; other shapes and dtypes fall back to PyTorch.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#define KB_ONLY_EPI 0
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
"""

CPP_SRC = r"""
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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

// bf16 / fp16: y = x W^T + b, rounded once, by cuBLASLt with its bias epilogue (eager's own
// kernel, wgmma + TMA on Hopper: our mma.sync bf16 GEMM reached 43-56 % of it), at::addmm_out
// for operands it does not take. fp32: our 3xTF32 GEMM, faster than cuBLAS's SGEMM.
static torch::Tensor linear_half(const torch::Tensor& x, const torch::Tensor& w, const c10::optional<torch::Tensor>& b,
                                 torch::Tensor& y, int64_t M, int64_t K) {
  auto y2 = y.view({M, w.size(0)});
  if (M == 0) return y;
  if (b.has_value() && kblt::takes(x, w, *b))
    kblt::linear_into(x, w, *b, y2, M, K);
  else if (b.has_value())
    at::addmm_out(y2, *b, x.reshape({M, K}), w.t());
  else
    at::mm_out(y2, x.reshape({M, K}), w.t());
  return y;
}

torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> b) {
  const auto dt = x.scalar_type();
  const bool half = dt == at::kBFloat16 || dt == at::kHalf;
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || half) && w.scalar_type() == dt, "fp32/bf16/fp16 CUDA");
  const int64_t K = x.size(-1), N = w.size(0);
  TORCH_CHECK(w.dim() == 2 && w.size(1) == K, "weight must be [N, K]");
  TORCH_CHECK(half || (N % 192 == 0 && K % 32 == 0), "fp32 needs N % 192 == 0 and K % 32 == 0");
  if (b.has_value())
    TORCH_CHECK(b->scalar_type() == dt && b->numel() == N, "bias: N values of x's dtype");
  const c10::cuda::CUDAGuard guard(x.device());
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto y = torch::empty(sizes, x.options());
  const int64_t M = x.numel() / K;
  if (half) return linear_half(x, w, b, y, M, K);
  auto x2 = x.reshape({-1, K}).contiguous();
  auto wc = w.contiguous();
  torch::Tensor bc;
  if (b.has_value()) bc = b->contiguous();
  if (M == 0) return y;
  TORCH_CHECK(M < (int64_t)1 << 30, "too many rows");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x2.data_ptr()) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(wc.data_ptr()) % 16 == 0, "x and weight must be 16-byte aligned");
  const cudaError_t err = launch_gemm_epilogue(false, 0, x2.data_ptr(), wc.data_ptr(),
                                               bc.defined() ? bc.data_ptr() : nullptr, nullptr, y.data_ptr(),
                                               (int)M, (int)N, (int)K, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "gemm_bias launch: ", cudaGetErrorString(err));
  return y;
}
"""

_ext = load_inline(
    name="kb_gemm_bias",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["linear_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    extra_ldflags=["-lcublasLt"],
    verbose=False,
)


def _supported(x, w):
    """fp32 needs our kernel's shapes; bf16 / fp16 go to cuBLASLt (any shape)."""
    if not x.is_cuda or w.dtype != x.dtype or x.dim() < 1 or w.shape[1] != x.shape[-1]:
        return False
    if x.dtype in (torch.bfloat16, torch.float16):
        return True
    return x.dtype == torch.float32 and w.shape[0] % 192 == 0 and x.shape[-1] % 32 == 0


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)

    def forward(self, x):
        # Plain dict lookups: at BERT's sizes this forward's time is mostly host time.
        params = self._modules["dense"]._parameters
        w, b = params["weight"], params["bias"]
        if _supported(x, w):
            return _ext.linear_forward(x, w, b)
        return F.linear(x, w, b)
