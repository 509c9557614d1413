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
