"""BERT softmax attention, softmax(q k^T / sqrt(d)) v on q, k, v of (B, 12, S, 64), fused
flash-attention style: one kernel; 64-key K/V tiles stream through a double-buffered
cp.async smem ring, scores and the online softmax stay in registers (the S x S matrix is
never written). fp32: 3xTF32 split-precision tensor-core mma (fp32-accurate); bf16:
mma.m16n8k16 with ldmatrix.trans for V. Needs head dim 64 and S % 64 == 0, else PyTorch.
"""

import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// softmax(q k^T * scale) v for head dim 64, flash-attention style: one block = 64 queries of
// one (batch, head), 4 warps of 16 query rows; K/V tiles of 64 keys stream through a
// double-buffered cp.async smem ring; scores, online softmax (running max and sum) and the
// output accumulate in registers, so the S x S score matrix never exists in memory.
// fp32: 3xTF32 split precision on mma.m16n8k8 (fp32-accurate); bf16: mma.m16n8k16.
namespace kba {
constexpr int D = 64, BQ = 64, BKV = 64, THREADS = 128;

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
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
__device__ __forceinline__ void mma3(float* d, const uint32_t* ah, const uint32_t* al, const uint32_t* bh,
                                     const uint32_t* bl) {
  mma_tf32(d, al, bh);
  mma_tf32(d, ah, bl);
  mma_tf32(d, ah, bh);
}
__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Smem row pitch in elements: fp32 K rows 72 (float2 fragment loads conflict-free), fp32 V
// rows 68 (column reads conflict-free); bf16 rows 72 (144 B: ldmatrix and u32 loads clean).
template <typename T> struct Pitch;
template <> struct Pitch<float> { static constexpr int K = 72, V = 68; };
template <> struct Pitch<__nv_bfloat16> { static constexpr int K = 72, V = 72; };
template <typename T>
__host__ __device__ constexpr int stage_bytes() { return BKV * (Pitch<T>::K + Pitch<T>::V) * (int)sizeof(T); }

template <typename T>
__device__ __forceinline__ void load_kv(T* sK, T* sV, const T* k, const T* v, int tid) {
  constexpr int EPC = 16 / sizeof(T), CPR = D / EPC;  // chunks per row
#pragma unroll
  for (int i = 0; i < BKV * CPR / THREADS; ++i) {
    const int id = tid + i * THREADS, r = id / CPR, c = id % CPR;
    cp_async16((uint32_t)__cvta_generic_to_shared(sK + r * Pitch<T>::K + c * EPC), k + r * D + c * EPC);
    cp_async16((uint32_t)__cvta_generic_to_shared(sV + r * Pitch<T>::V + c * EPC), v + r * D + c * EPC);
  }
}

// Online softmax over one 64-key tile for this thread's two rows (g, g+8): s holds raw
// scores and becomes probabilities; o is rescaled by the change of the running max.
__device__ __forceinline__ void online_softmax(float (&s)[8][4], float (&o)[8][4], float (&m)[2], float (&l)[2],
                                               float sl2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m[h], mx), corr = exp2f((m[h] - mn) * sl2), base = mn * sl2;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j][2 * h] = exp2f(fmaf(s[j][2 * h], sl2, -base));
      s[j][2 * h + 1] = exp2f(fmaf(s[j][2 * h + 1], sl2, -base));
      sum += s[j][2 * h] + s[j][2 * h + 1];
      o[j][2 * h] *= corr;
      o[j][2 * h + 1] *= corr;
    }
    l[h] = l[h] * corr + sum;
    m[h] = mn;
  }
}

// fp32 tile: S = Q K^T (3xTF32, k permuted inside each k8 so one float2 gives a fragment),
// softmax, O += P V (P's accumulator layout is directly the A fragment under that permutation).
__device__ __forceinline__ void attend_tile(const float* sK, const float* sV, const uint32_t (&qh)[8][4],
                                            const uint32_t (&ql)[8][4], float (&o)[8][4], float (&m)[2],
                                            float (&l)[2], float sl2, int g, int t) {
  float s[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 kv = *reinterpret_cast<const float2*>(sK + (8 * j + g) * Pitch<float>::K + 8 * ks + 2 * t);
      uint32_t bh[2], bl[2];
      split_tf32(kv.x, bh[0], bl[0]);
      split_tf32(kv.y, bh[1], bl[1]);
      mma3(s[j], qh[ks], ql[ks], bh, bl);
    }
  online_softmax(s, o, m, l, sl2);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    uint32_t ah[4], al[4];
    split_tf32(s[kk][0], ah[0], al[0]);
    split_tf32(s[kk][2], ah[1], al[1]);
    split_tf32(s[kk][1], ah[2], al[2]);
    split_tf32(s[kk][3], ah[3], al[3]);
#pragma unroll
    for (int dj = 0; dj < 8; ++dj) {
      const float* vp = sV + (8 * kk + 2 * t) * Pitch<float>::V + 8 * dj + g;
      uint32_t bh[2], bl[2];
      split_tf32(vp[0], bh[0], bl[0]);
      split_tf32(vp[Pitch<float>::V], bh[1], bl[1]);
      mma3(o[dj], ah, al, bh, bl);
    }
  }
}

__device__ __forceinline__ void attend_tile(const __nv_bfloat16* sK, const __nv_bfloat16* sV,
                                            const uint32_t (&q)[4][4], float (&o)[8][4], float (&m)[2],
                                            float (&l)[2], float sl2, int g, int t, int lane) {
  float s[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __nv_bfloat16* kp = sK + (8 * j + g) * Pitch<__nv_bfloat16>::K + 16 * ks + 2 * t;
      const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(kp), *reinterpret_cast<const uint32_t*>(kp + 8)};
      mma_bf16(s[j], q[ks], b);
    }
  online_softmax(s, o, m, l, sl2);
  const uint32_t v0 = (uint32_t)__cvta_generic_to_shared(sV);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                           pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                           pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < 4; ++dp) {
      const int key = 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8, d = 16 * dp + (lane >> 4) * 8;
      uint32_t r[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(v0 + (uint32_t)(key * Pitch<__nv_bfloat16>::V + d) * 2));
      mma_bf16(o[2 * dp], a, r);
      mma_bf16(o[2 * dp + 1], a, r + 2);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
                     int S, float sl2) {
  extern __shared__ __align__(128) char smem[];
  constexpr int SB = stage_bytes<T>();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const size_t head = (size_t)blockIdx.y * S * D;
  const int q0 = blockIdx.x * BQ + warp * 16;
  const T* kh = k + head;
  const T* vh = v + head;
  auto sK = [&](int st) { return reinterpret_cast<T*>(smem + st * SB); };
  auto sV = [&](int st) { return reinterpret_cast<T*>(smem + st * SB) + BKV * Pitch<T>::K; };

  load_kv<T>(sK(0), sV(0), kh, vh, tid);
  cp_commit();

  float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.f;

  const T* qr0 = q + head + (size_t)(q0 + g) * D;
  const T* qr1 = qr0 + 8 * D;
  constexpr bool F32 = sizeof(T) == 4;
  // Q fragments stay in registers for the whole key loop.
  uint32_t qa[F32 ? 8 : 4][4], qb[F32 ? 8 : 1][4];
  if constexpr (F32) {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const float2 x0 = *reinterpret_cast<const float2*>(reinterpret_cast<const float*>(qr0) + 8 * ks + 2 * t);
      const float2 x1 = *reinterpret_cast<const float2*>(reinterpret_cast<const float*>(qr1) + 8 * ks + 2 * t);
      split_tf32(x0.x, qa[ks][0], qb[ks][0]);
      split_tf32(x1.x, qa[ks][1], qb[ks][1]);
      split_tf32(x0.y, qa[ks][2], qb[ks][2]);
      split_tf32(x1.y, qa[ks][3], qb[ks][3]);
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      qa[ks][0] = *reinterpret_cast<const uint32_t*>(qr0 + 16 * ks + 2 * t);
      qa[ks][1] = *reinterpret_cast<const uint32_t*>(qr1 + 16 * ks + 2 * t);
      qa[ks][2] = *reinterpret_cast<const uint32_t*>(qr0 + 16 * ks + 8 + 2 * t);
      qa[ks][3] = *reinterpret_cast<const uint32_t*>(qr1 + 16 * ks + 8 + 2 * t);
    }
  }

  const int nkv = S / BKV;
  for (int kb = 0; kb < nkv; ++kb) {
    if (kb + 1 < nkv) {
      load_kv<T>(sK((kb + 1) & 1), sV((kb + 1) & 1), kh + (size_t)(kb + 1) * BKV * D, vh + (size_t)(kb + 1) * BKV * D,
                 tid);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    if constexpr (F32)
      attend_tile(sK(kb & 1), sV(kb & 1), qa, qb, o, m, l, sl2, g, t);
    else
      attend_tile(sK(kb & 1), sV(kb & 1), qa, o, m, l, sl2, g, t, lane);
    __syncthreads();  // the next prefetch overwrites this stage
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    l[h] = 1.f / l[h];
  }
  T* or0 = out + head + (size_t)(q0 + g) * D;
#pragma unroll
  for (int dj = 0; dj < 8; ++dj)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      T* p = or0 + h * 8 * D + 8 * dj + 2 * t;
      if constexpr (F32)
        *reinterpret_cast<float2*>(p) = make_float2(o[dj][2 * h] * l[h], o[dj][2 * h + 1] * l[h]);
      else
        *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(o[dj][2 * h] * l[h], o[dj][2 * h + 1] * l[h]);
    }
}

template <typename T>
cudaError_t launch_t(const void* q, const void* k, const void* v, void* out, int BH, int S, float scale,
                     cudaStream_t stream) {
  constexpr int smem = 2 * stage_bytes<T>();
  static cudaError_t configured =
      cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (configured != cudaSuccess) return configured;
  const dim3 grid(S / BQ, BH);
  attention_kernel<T><<<grid, THREADS, smem, stream>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                       static_cast<const T*>(v), static_cast<T*>(out), S,
                                                       scale * 1.4426950408889634f);
  return cudaGetLastError();
}
}  // namespace kba

// q, k, v, out: [BH, S, 64] contiguous; S % 64 == 0.
cudaError_t launch_attention(bool bf16, const void* q, const void* k, const void* v, void* out, int BH, int S,
                             float scale, cudaStream_t stream) {
  return bf16 ? kba::launch_t<__nv_bfloat16>(q, k, v, out, BH, S, scale, stream)
              : kba::launch_t<float>(q, k, v, out, BH, S, scale, stream);
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

cudaError_t launch_attention(bool bf16, const void* q, const void* k, const void* v, void* out, int BH, int S,
                             float scale, cudaStream_t stream);

torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
  const auto dt = q.scalar_type();
  TORCH_CHECK(q.is_cuda() && (dt == at::kFloat || dt == at::kBFloat16), "q: CUDA fp32 or bf16");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "q, k, v: same shape");
  TORCH_CHECK(k.scalar_type() == dt && v.scalar_type() == dt, "q, k, v: same dtype");
  TORCH_CHECK(q.dim() >= 2 && q.size(-1) == 64 && q.size(-2) % 64 == 0, "head dim 64, S % 64 == 0");
  const c10::cuda::CUDAGuard guard(q.device());
  auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  auto out = torch::empty_like(qc);
  const int64_t S = q.size(-2), BH = q.numel() / (S * 64);
  if (BH == 0 || S == 0) return out;
  TORCH_CHECK(BH < 65536, "grid.y limit: B * H < 65536");
  const cudaError_t err = launch_attention(dt == at::kBFloat16, qc.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                                           out.data_ptr(), (int)BH, (int)S, (float)scale,
                                           c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "attention launch: ", cudaGetErrorString(err));
  return out;
}
"""

_ext = load_inline(
    name="kb_softmax_attention",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["attention_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"],
    verbose=False,
)


def _supported(q, k, v):
    return (q.is_cuda and q.dtype in (torch.float32, torch.bfloat16) and q.dim() >= 2
            and q.shape[-1] == 64 and q.shape[-2] % 64 == 0 and k.shape == q.shape and v.shape == q.shape
            and k.dtype == q.dtype and v.dtype == q.dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scale = 1.0 / math.sqrt(q.shape[-1])
        if _supported(q, k, v):
            return _ext.attention_forward(q, k, v, scale)
        return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v
