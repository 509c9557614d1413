"""BERT FFN output with GELU: y = LayerNorm(GELU(dense(x)) + residual) in TWO launches.

Variant `__cublas`: the GEMM and bias are cuBLAS at every precision (bf16 / fp16: the
cuBLASLt bias-epilogue call eager makes, its algorithm chosen once per shape, so bf16 rounds
identically; fp32: at::addmm, which follows torch's TF32 flag, with TF32 off a true fp32
SGEMM), then ONE fused epilogue kernel: exact-erf GELU, residual and LayerNorm, one warp per 768-wide row held in registers (16-byte loads, warp-shuffle
two-pass statistics). bf16 rounds where eager rounds. PyTorch eager: 4 (addmm with bias, gelu, add, layer_norm) launches.
"""

import torch
import torch.nn as nn
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

// ---- BEGIN generated from _parts/cublas_fused_forward.cpp: edit there, then run reference_kernels/generate.py ----
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
cudaError_t launch_bias_act_res_ln(int dtype, bool gelu, const void* y, const void* b, const void* res,
                                   const void* gamma, const void* beta, void* out, int M, float eps,
                                   cudaStream_t stream);

torch::Tensor cublas_fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor res,
                                   torch::Tensor gamma, torch::Tensor beta, double eps, bool gelu) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(x.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf),
              "x: CUDA fp32, bf16 or fp16");
  for (const auto* p : {&w, &b, &res, &gamma, &beta})
    TORCH_CHECK(p->scalar_type() == dt && p->device() == x.device(), "all tensors: x's dtype and device");
  const int64_t K = x.size(-1), N = 768;
  TORCH_CHECK(w.dim() == 2 && w.size(0) == N && w.size(1) == K, "weight must be [768, K]");
  TORCH_CHECK(b.numel() == N && gamma.numel() == N && beta.numel() == N, "bias/gamma/beta: 768 values");
  TORCH_CHECK(res.size(-1) == N && res.numel() / N == x.numel() / K, "residual must be [..., 768] with x's rows");
  const c10::cuda::CUDAGuard guard(x.device());
  auto rc = res.contiguous(), gc = gamma.contiguous(), ec = beta.contiguous();
  auto out = torch::empty(res.sizes(), res.options());  // the GEMM's output, then LayerNorm's in place
  const int64_t M = x.numel() / K;
  if (M == 0) return out;
  auto out2 = out.view({M, N});
  if (kblt::takes(x, w, b))
    kblt::linear_into(x, w, b, out2, M, K);  // cuBLASLt with its bias epilogue
  else
    at::addmm_out(out2, b, x.reshape({M, K}), w.t());  // fp32 (follows torch's TF32 flag), unaligned operands
  const cudaError_t err = launch_bias_act_res_ln(kblt::kb_dtype(dt), gelu, out.data_ptr(), nullptr,
                                                 rc.data_ptr(), gc.data_ptr(), ec.data_ptr(), out.data_ptr(),
                                                 (int)M, (float)eps, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "bias_act_res_ln launch: ", cudaGetErrorString(err));
  return out;
}
// ---- END generated from _parts/cublas_fused_forward.cpp ----
"""

_ext = load_inline(
    name="kb_gemm_bias_gelu_add_ln__cublas",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["cublas_fused_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    extra_ldflags=["-lcublasLt"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, x, residual):
        if x.is_cuda and x.dtype in (torch.float32, torch.bfloat16, torch.float16):
            # Plain dict lookups: nn.Module's __getattr__ took ~0.8 us a lookup on the H100
            # machine's CPU, and at BERT's sizes this forward's time is mostly host time.
            dense, norm = self._modules["dense"]._parameters, self._modules["norm"]
            ln = norm._parameters
            return _ext.cublas_fused_forward(x, dense["weight"], dense["bias"], residual, ln["weight"], ln["bias"], norm.eps, True)
        return self.norm(torch.nn.functional.gelu(self.dense(x)) + residual)  # other dtypes/devices: plain PyTorch
