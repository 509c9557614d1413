// Variants of the BERT GELU and LayerNorm(768) kernels for benchmarks/memory_bound_variants.py,
// which builds this file (with its own C++ entry points) into one extension and times each
// variant against PyTorch eager. No torch headers here: `nvcc -c` checks it alone.
// "cur" variants copy the kernels gelu.py and layernorm.py shipped before the winners here
// were ported into them (gelu: t128_u1 fp32, poly bf16; layernorm: w8_occ4_nc_cs fp32,
// persist8_nc_cs bf16), kept as the baseline they were chosen against.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace mbv {

// ---------------------------------------------------------------- memory access flavours
enum { LD_PLAIN = 0, LD_NC = 1, LD_NC_PF = 2, LD_NC_EF = 3 };
enum { ST_PLAIN = 0, ST_CS = 1 };

// LD_NC: read-only path, no L1 allocation; LD_NC_PF: also a 256-byte L2 prefetch;
// LD_NC_EF: also an L2 evict-first policy (the input is read once).
template <int L>
__device__ __forceinline__ uint4 ld16(const uint4* p) {
  uint4 r;
  if constexpr (L == LD_PLAIN) {
    r = *p;
  } else if constexpr (L == LD_NC) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if constexpr (L == LD_NC_PF) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  }
  return r;
}

// ST_CS: streaming store (evict-first, as __stcs).
template <int S>
__device__ __forceinline__ void st16(uint4* p, uint4 v) {
  if constexpr (S == ST_PLAIN) {
    *p = v;
  } else {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  }
}

// 16 bytes <-> fp32 values: 4 floats, or 8 bf16 widened to fp32 (rounded once on the way out).
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
  static __device__ __forceinline__ float load1(const float* p) { return *p; }
  static __device__ __forceinline__ void store1(float* p, float v) { *p = v; }
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
  static __device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  static __device__ __forceinline__ void store1(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
};

// ---------------------------------------------------------------- GELU math
enum { M_ERF = 0, M_POLY = 1, M_COPY = 2 };

// erf(t) = sign(t) (1 - 2^(-t q(|t|))), q of degree 7 fitted to -log2(erfc t)/t on [0, 3.92]:
// |error| <= 1.1e-7 in fp32, 13 instructions against erff's ~27 (as _parts/layernorm_epilogue.cuh).
__device__ __forceinline__ float erf_poly(float v) {
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

template <int MATH>
__device__ __forceinline__ float act1(float v) {
  if constexpr (MATH == M_COPY) return v;
  const float t = v * 0.70710678118654752f;
  return 0.5f * v * (1.f + (MATH == M_POLY ? erf_poly(t) : erff(t)));
}

template <typename T, int MATH>
__device__ __forceinline__ uint4 act_vec(uint4 q) {
  if constexpr (MATH == M_COPY) {
    return q;
  } else {
    float v[Pack<T>::E];
    Pack<T>::unpack(q, v);
#pragma unroll
    for (int i = 0; i < Pack<T>::E; ++i) v[i] = act1<MATH>(v[i]);
    return Pack<T>::pack(v);
  }
}

// The last n % E elements, one per thread of block 0.
template <typename T, int MATH>
__device__ __forceinline__ void ew_tail(const T* x, T* y, size_t n, size_t nvec) {
  constexpr int E = Pack<T>::E;
  if (blockIdx.x != 0) return;
  for (size_t i = nvec * E + threadIdx.x; i < n; i += blockDim.x)
    Pack<T>::store1(y + i, act1<MATH>(Pack<T>::load1(x + i)));
}

// One pass, no grid stride: each thread loads UNROLL vectors (all in flight) then stores them
// (the shipped gelu.py is <256, 4, M_ERF, LD_PLAIN, ST_PLAIN>).
template <typename T, int THREADS, int UNROLL, int MATH, int LD, int ST>
__global__ void __launch_bounds__(THREADS) ew_onepass(const T* __restrict__ x, T* __restrict__ y, size_t n) {
  const size_t nvec = n / Pack<T>::E, base = (size_t)blockIdx.x * THREADS * UNROLL + threadIdx.x;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  uint4 v[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (base + u * THREADS < nvec) v[u] = ld16<LD>(xv + base + u * THREADS);
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (base + u * THREADS < nvec) st16<ST>(yv + base + u * THREADS, act_vec<T, MATH>(v[u]));
  ew_tail<T, MATH>(x, y, n, nvec);
}

// Grid stride over chunks of THREADS * UNROLL vectors per block: full chunks without bounds
// checks, then at most one partial chunk per thread.
template <typename T, int THREADS, int UNROLL, int MATH, int LD, int ST>
__global__ void __launch_bounds__(THREADS) ew_gridstride(const T* __restrict__ x, T* __restrict__ y, size_t n) {
  const size_t nvec = n / Pack<T>::E, step = (size_t)gridDim.x * THREADS * UNROLL;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  size_t i = (size_t)blockIdx.x * THREADS * UNROLL + threadIdx.x;
  for (; i + (UNROLL - 1) * THREADS < nvec; i += step) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = ld16<LD>(xv + i + u * THREADS);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) st16<ST>(yv + i + u * THREADS, act_vec<T, MATH>(v[u]));
  }
  uint4 v[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (i + u * THREADS < nvec) v[u] = ld16<LD>(xv + i + u * THREADS);
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
    if (i + u * THREADS < nvec) st16<ST>(yv + i + u * THREADS, act_vec<T, MATH>(v[u]));
  ew_tail<T, MATH>(x, y, n, nvec);
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

typedef cudaError_t (*EwFn)(const void*, void*, size_t, cudaStream_t);

template <typename T, int THREADS, int UNROLL, int MATH, int LD, int ST, int PER_SM>
cudaError_t launch_onepass(const void* x, void* y, size_t n, cudaStream_t s) {
  const size_t per = (size_t)THREADS * UNROLL, vecs = n / Pack<T>::E;
  size_t blocks = (vecs + per - 1) / per;
  if (blocks == 0) blocks = 1;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  ew_onepass<T, THREADS, UNROLL, MATH, LD, ST><<<(unsigned)blocks, THREADS, 0, s>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n);
  return cudaGetLastError();
}

// PER_SM blocks per SM (0: as many as are resident), never more than the chunks.
template <typename T, int THREADS, int UNROLL, int MATH, int LD, int ST, int PER_SM>
cudaError_t launch_gridstride(const void* x, void* y, size_t n, cudaStream_t s) {
  static int cache = 0;
  const int res = resident(ew_gridstride<T, THREADS, UNROLL, MATH, LD, ST>, THREADS, cache);
  const int per_sm = PER_SM > 0 && PER_SM < res ? PER_SM : res;
  const size_t per = (size_t)THREADS * UNROLL, need = (n / Pack<T>::E + per - 1) / per;
  size_t blocks = (size_t)per_sm * sm_count();
  if (blocks > need) blocks = need;
  if (blocks == 0) blocks = 1;
  ew_gridstride<T, THREADS, UNROLL, MATH, LD, ST><<<(unsigned)blocks, THREADS, 0, s>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n);
  return cudaGetLastError();
}

struct EwVariant { const char* name; EwFn f32; EwFn bf16; };
#define MBV_EW(name, L, TH, UN, MA, LDK, STK, K) \
  { name, &L<float, TH, UN, MA, LDK, STK, K>, &L<__nv_bfloat16, TH, UN, MA, LDK, STK, K> }

const EwVariant kEw[] = {
    MBV_EW("cur", launch_onepass, 256, 4, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("t128", launch_onepass, 128, 4, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("t512", launch_onepass, 512, 4, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("u2", launch_onepass, 256, 2, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("t128_u1", launch_onepass, 128, 1, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("u8", launch_onepass, 256, 8, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("gs2", launch_gridstride, 256, 4, M_ERF, LD_PLAIN, ST_PLAIN, 2),
    MBV_EW("gs4", launch_gridstride, 256, 4, M_ERF, LD_PLAIN, ST_PLAIN, 4),
    MBV_EW("gsfull", launch_gridstride, 256, 4, M_ERF, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("poly", launch_onepass, 256, 4, M_POLY, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("nc", launch_onepass, 256, 4, M_ERF, LD_NC, ST_PLAIN, 0),
    MBV_EW("ncpf", launch_onepass, 256, 4, M_ERF, LD_NC_PF, ST_PLAIN, 0),
    MBV_EW("ncef", launch_onepass, 256, 4, M_ERF, LD_NC_EF, ST_PLAIN, 0),
    MBV_EW("cs", launch_onepass, 256, 4, M_ERF, LD_PLAIN, ST_CS, 0),
    MBV_EW("poly_nc_cs", launch_onepass, 256, 4, M_POLY, LD_NC, ST_CS, 0),
    MBV_EW("poly_u8_t128", launch_onepass, 128, 8, M_POLY, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("poly_gsfull_nc_cs", launch_gridstride, 256, 4, M_POLY, LD_NC, ST_CS, 0),
    MBV_EW("copy", launch_onepass, 256, 4, M_COPY, LD_PLAIN, ST_PLAIN, 0),
    MBV_EW("copy_gsfull", launch_gridstride, 256, 4, M_COPY, LD_PLAIN, ST_PLAIN, 0),
};
#undef MBV_EW

// ---------------------------------------------------------------- LayerNorm(768)
constexpr int kHidden = 768;

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// The shipped layernorm.py kernel (from _parts/layernorm_epilogue.cuh, bf16/fp32, no GELU):
// 8 warps per block, a warp per row, launched as a programmatic dependent.
template <typename T>
__global__ void __launch_bounds__(8 * 32, 3)
    ln_cur(const T* y, const T* __restrict__ bias, const T* __restrict__ res, const T* __restrict__ gamma,
           const T* __restrict__ beta, T* out, int M, float eps) {
  using P = Pack<T>;
  constexpr int E = P::E, C = kHidden / (32 * E);
  const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (row >= M) return;
  const size_t base = (size_t)row * kHidden;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  float v[C][E];
#pragma unroll
  for (int c = 0; c < C; ++c) P::unpack(*reinterpret_cast<const uint4*>(y + base + (c * 32 + lane) * E), v[c]);
  if (res) {
    float r[C][E];
#pragma unroll
    for (int c = 0; c < C; ++c) P::unpack(*reinterpret_cast<const uint4*>(res + base + (c * 32 + lane) * E), r[c]);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float b[E];
      if (bias) P::unpack(*reinterpret_cast<const uint4*>(bias + (c * 32 + lane) * E), b);
#pragma unroll
      for (int e = 0; e < E; ++e) v[c][e] = (bias ? v[c][e] + b[e] : v[c][e]) + r[c][e];
    }
  }
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
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float ga[E], be[E];
    if (gamma) P::unpack(*reinterpret_cast<const uint4*>(gamma + (c * 32 + lane) * E), ga);
    if (beta) P::unpack(*reinterpret_cast<const uint4*>(beta + (c * 32 + lane) * E), be);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float o = (v[c][e] - mean) * rstd;
      if (gamma) o *= ga[e];
      if (beta) o += be[e];
      v[c][e] = o;
    }
    *reinterpret_cast<uint4*>(out + base + (c * 32 + lane) * E) = P::pack(v[c]);
  }
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
template <typename T, int WARPS, int LD, int ST, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB > 0 ? MINB : 1) ln_warp(const T* __restrict__ x, const T* __restrict__ gamma,
                                                      const T* __restrict__ beta, T* __restrict__ out, int M, float eps) {
  constexpr int V = kHidden / Pack<T>::E, C = V / 32;
  const int lane = threadIdx.x & 31, row = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= M) return;
  const uint4* xr = reinterpret_cast<const uint4*>(x) + (size_t)row * V;
  uint4* orow = reinterpret_cast<uint4*>(out) + (size_t)row * V;
  uint4 raw[C];
#pragma unroll
  for (int c = 0; c < C; ++c) raw[c] = ld16<LD>(xr + c * 32 + lane);
  ln_warp_row<T, C>(raw, gamma, beta, eps, lane);
#pragma unroll
  for (int c = 0; c < C; ++c) st16<ST>(orow + c * 32 + lane, raw[c]);
}

// Resident warps loop over rows (stride = all warps of the grid), the next row's loads issued
// before the current row is reduced and stored.
template <typename T, int WARPS, int LD, int ST>
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
  for (int c = 0; c < C; ++c) nxt[c] = ld16<LD>(xv + (size_t)row * V + c * 32 + lane);
  for (; row < M; row += stride) {
    uint4 raw[C];
#pragma unroll
    for (int c = 0; c < C; ++c) raw[c] = nxt[c];
    if (row + stride < M) {
#pragma unroll
      for (int c = 0; c < C; ++c) nxt[c] = ld16<LD>(xv + (size_t)(row + stride) * V + c * 32 + lane);
    }
    ln_warp_row<T, C>(raw, gamma, beta, eps, lane);
#pragma unroll
    for (int c = 0; c < C; ++c) st16<ST>(ov + (size_t)row * V + c * 32 + lane, raw[c]);
  }
}

// A block per row, one 16-byte vector per thread (fp32 192 threads, bf16 96); the two sums
// cross warps through shared memory (one slot each, so two barriers in all).
template <typename T, int LD, int ST>
__global__ void __launch_bounds__(kHidden / Pack<T>::E) ln_block(const T* __restrict__ x, const T* __restrict__ gamma,
                                                                 const T* __restrict__ beta, T* __restrict__ out, int M, float eps) {
  using P = Pack<T>;
  constexpr int E = P::E, V = kHidden / E, W = V / 32;
  __shared__ float red[2][W];
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const size_t at = (size_t)blockIdx.x * V + t;
  float v[E];
  P::unpack(ld16<LD>(reinterpret_cast<const uint4*>(x) + at), v);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) s += v[e];
  s = warp_sum(s);
  if (lane == 0) red[0][w] = s;
  __syncthreads();
  s = 0.f;
#pragma unroll
  for (int i = 0; i < W; ++i) s += red[0][i];
  const float mean = s * (1.f / kHidden);
  float q = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) q += (v[e] - mean) * (v[e] - mean);
  q = warp_sum(q);
  if (lane == 0) red[1][w] = q;
  __syncthreads();
  q = 0.f;
#pragma unroll
  for (int i = 0; i < W; ++i) q += red[1][i];
  const float rstd = rsqrtf(q * (1.f / kHidden) + eps);
  float ga[E], be[E];
  P::unpack(__ldg(reinterpret_cast<const uint4*>(gamma) + t), ga);
  P::unpack(__ldg(reinterpret_cast<const uint4*>(beta) + t), be);
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = (v[e] - mean) * rstd * ga[e] + be[e];
  st16<ST>(reinterpret_cast<uint4*>(out) + at, P::pack(v));
}

typedef cudaError_t (*LnFn)(const void*, const void*, const void*, void*, int, float, cudaStream_t);

// As layernorm.py launches it: device and compute capability asked on every call, PDL on sm_90+.
template <typename T, bool PDL>
cudaError_t launch_ln_cur(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((M + 7) / 8);
  cfg.blockDim = dim3(8 * 32);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = PDL && major >= 9 ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&cfg, ln_cur<T>, static_cast<const T*>(x), (const T*)nullptr, (const T*)nullptr,
                                       static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <typename T, int WARPS, int LD, int ST, int MINB = 0>
cudaError_t launch_ln_warp(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  ln_warp<T, WARPS, LD, ST, MINB><<<(M + WARPS - 1) / WARPS, WARPS * 32, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return cudaGetLastError();
}

template <typename T, int WARPS, int LD, int ST>
cudaError_t launch_ln_persist(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  static int cache = 0;
  const int res = resident(ln_persist<T, WARPS, LD, ST>, WARPS * 32, cache);
  int blocks = res * sm_count();
  const int need = (M + WARPS - 1) / WARPS;
  if (blocks > need) blocks = need;
  if (blocks < 1) blocks = 1;
  ln_persist<T, WARPS, LD, ST><<<blocks, WARPS * 32, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return cudaGetLastError();
}

template <typename T, int WARPS, int LD, int ST>
cudaError_t launch_ln_block(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  ln_block<T, LD, ST><<<M, kHidden / Pack<T>::E, 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(b), static_cast<T*>(out), M, eps);
  return cudaGetLastError();
}

template <typename T, int PDL, int LDK, int STK>
cudaError_t launch_ln_cur_t(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  return launch_ln_cur<T, PDL != 0>(x, g, b, out, M, eps, s);
}

template <typename T, int WARPS, int LD, int ST>
cudaError_t launch_ln_warp_occ4(const void* x, const void* g, const void* b, void* out, int M, float eps, cudaStream_t s) {
  return launch_ln_warp<T, WARPS, LD, ST, 4>(x, g, b, out, M, eps, s);
}

struct LnVariant { const char* name; LnFn f32; LnFn bf16; };
#define MBV_LN(name, L, W, LDK, STK) { name, &L<float, W, LDK, STK>, &L<__nv_bfloat16, W, LDK, STK> }

const LnVariant kLn[] = {
    MBV_LN("cur", launch_ln_cur_t, 1, 0, 0),
    MBV_LN("cur_nopdl", launch_ln_cur_t, 0, 0, 0),
    MBV_LN("w4", launch_ln_warp, 4, LD_PLAIN, ST_PLAIN),
    MBV_LN("w8", launch_ln_warp, 8, LD_PLAIN, ST_PLAIN),
    MBV_LN("w16", launch_ln_warp, 16, LD_PLAIN, ST_PLAIN),
    MBV_LN("w8_nc", launch_ln_warp, 8, LD_NC, ST_PLAIN),
    MBV_LN("w8_cs", launch_ln_warp, 8, LD_PLAIN, ST_CS),
    MBV_LN("w8_nc_cs", launch_ln_warp, 8, LD_NC, ST_CS),
    MBV_LN("w4_nc_cs", launch_ln_warp, 4, LD_NC, ST_CS),
    MBV_LN("w8_ncef_cs", launch_ln_warp, 8, LD_NC_EF, ST_CS),
    MBV_LN("w8_occ4_nc_cs", launch_ln_warp_occ4, 8, LD_NC, ST_CS),
    MBV_LN("block", launch_ln_block, 0, LD_PLAIN, ST_PLAIN),
    MBV_LN("block_nc_cs", launch_ln_block, 0, LD_NC, ST_CS),
    MBV_LN("persist8", launch_ln_persist, 8, LD_PLAIN, ST_PLAIN),
    MBV_LN("persist8_nc_cs", launch_ln_persist, 8, LD_NC, ST_CS),
    MBV_LN("persist4_nc_cs", launch_ln_persist, 4, LD_NC, ST_CS),
};
#undef MBV_LN

}  // namespace mbv

// ---------------------------------------------------------------- entry points (C linkage-free)
int mbv_ew_count() { return (int)(sizeof(mbv::kEw) / sizeof(mbv::kEw[0])); }
const char* mbv_ew_name(int i) { return mbv::kEw[i].name; }
cudaError_t mbv_ew_launch(int i, bool bf16, const void* x, void* y, size_t n, cudaStream_t s) {
  if (i < 0 || i >= mbv_ew_count()) return cudaErrorInvalidValue;
  return (bf16 ? mbv::kEw[i].bf16 : mbv::kEw[i].f32)(x, y, n, s);
}

int mbv_ln_count() { return (int)(sizeof(mbv::kLn) / sizeof(mbv::kLn[0])); }
const char* mbv_ln_name(int i) { return mbv::kLn[i].name; }
cudaError_t mbv_ln_launch(int i, bool bf16, const void* x, const void* g, const void* b, void* out, int M, float eps,
                          cudaStream_t s) {
  if (i < 0 || i >= mbv_ln_count()) return cudaErrorInvalidValue;
  return (bf16 ? mbv::kLn[i].bf16 : mbv::kLn[i].f32)(x, g, b, out, M, eps, s);
}
