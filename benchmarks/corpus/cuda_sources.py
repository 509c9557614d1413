"""CUDA C++ sources of the corpus's custom kernels (for load_inline, sm_90): an elementwise
map, a fused elementwise tail after a conv/GEMM, a row softmax and a sum over dim 1.
Each exports `run`; DECL_* is its C++ declaration. `bad` makes a kernel wrong (the last
element never written), crash (a device trap) or fail to compile (a missing semicolon)."""

from __future__ import annotations

DECL_MAP = "torch::Tensor run(torch::Tensor x, double p);"
DECL_ROWS = "torch::Tensor run(torch::Tensor x);"

MAP_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void map_{tag}(const float* __restrict__ x, float* __restrict__ out, int64_t n,
                          float p) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    {trap}
    if (i < n{limit}) {{
        float v = x[i];
        out[i] = {expr}{semicolon}
    }}
}}

torch::Tensor run(torch::Tensor x, double p) {{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x: a contiguous float32 CUDA tensor");
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    if (n == 0) return out;
    int threads = {threads};
    int64_t blocks = (n + threads - 1) / threads;
    map_{tag}<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, (float)p);
    return out;
}}
"""

TAIL_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>

__global__ void tail_{tag}(const float* __restrict__ y, float* __restrict__ out, int64_t n,
                           int64_t inner, int64_t channels{kparams}) {{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += step) {{{pre}
        float v = y[i];
{body}
        out[i] = v;
    }}
}}

torch::Tensor run(torch::Tensor y{hparams}) {{
    TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat32,
                "y: a contiguous float32 CUDA tensor");
    TORCH_CHECK(y.dim() >= 2, "y: (batch, channels, ...)");
    auto out = torch::empty_like(y);
    const int64_t n = y.numel();
    if (n == 0) return out;
    const int64_t channels = y.size(1);
    const int64_t inner = n / (y.size(0) * channels);{checks}
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65536);
    tail_{tag}<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), n, inner, channels{kargs});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""

PARAM_CHECK = """
    TORCH_CHECK({p}.is_cuda() && {p}.is_contiguous(), "{p}: a contiguous CUDA tensor");
    TORCH_CHECK({p}.scalar_type() == torch::kFloat32 && {p}.numel() == channels,
                "{p}: one float32 value per channel");"""

BLOCK_REDUCE = r"""
template <bool IsMax>
__device__ float block_reduce(float v, float* buf) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = buf[threadIdx.x + s];
            buf[threadIdx.x] = IsMax ? fmaxf(buf[threadIdx.x], o) : buf[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = buf[0];
    __syncthreads();
    return r;
}
"""

SOFTMAX_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <math.h>
""" + BLOCK_REDUCE.replace("{", "{{").replace("}", "}}") + r"""
__global__ void softmax_{tag}(const float* __restrict__ x, float* __restrict__ out,
                              int64_t cols) {{
    __shared__ float buf[{threads}];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* dst = out + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    m = block_reduce<true>(m, buf);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(row[j] - m);
    s = block_reduce<false>(s, buf);
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dst[j] = expf(row[j] - m) * inv;
}}

torch::Tensor run(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2 &&
                x.scalar_type() == torch::kFloat32, "x: a contiguous 2-D float32 CUDA tensor");
    auto out = torch::empty_like(x);
    if (x.numel() == 0) return out;
    softmax_{tag}<<<(unsigned)x.size(0), {threads}>>>(x.data_ptr<float>(),
                                                     out.data_ptr<float>(), x.size(1));
    return out;
}}
"""

SUM_DIM1_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// out[b, 0, k] = sum over j of x[b, j, k]: one thread per (b, k), reads coalesced over k
__global__ void sum_{tag}(const float* __restrict__ x, float* __restrict__ out,
                          int64_t batch, int64_t rows, int64_t cols) {{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= batch * cols) return;
    int64_t b = idx / cols, k = idx % cols;
    const float* src = x + b * rows * cols + k;
    float acc = 0.f;
    for (int64_t j = 0; j < rows; ++j) acc += src[j * cols];
    out[idx] = acc;
}}

torch::Tensor run(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 3 &&
                x.scalar_type() == torch::kFloat32, "x: a contiguous 3-D float32 CUDA tensor");
    auto out = torch::empty({{x.size(0), 1, x.size(2)}}, x.options());
    int64_t n = x.size(0) * x.size(2);
    if (n == 0) return out;
    int threads = {threads};
    sum_{tag}<<<(unsigned)((n + threads - 1) / threads), threads>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), x.size(2));
    return out;
}}
"""


def map_source(tag: str, expr: str, bad: str | None = None, threads: int = 256) -> str:
    """An elementwise kernel out[i] = expr(v = x[i], p)."""
    return MAP_SRC.format(tag=tag, expr=expr, threads=threads,
                          trap="if (i == 0) __trap();" if bad == "crash" else "",
                          limit=" - 1" if bad == "wrong" else "",
                          semicolon="" if bad == "compile" else ";")


def tail_source(tag: str, spec: dict, bad: str | None = None) -> str:
    """The fused elementwise tail of a level-2 spec (specs.L2)."""
    chans, scalars = spec["chans"], spec["scalars"]
    body = spec["wrong"] if bad == "wrong" else spec["cuda"]
    return TAIL_SRC.format(
        tag=tag, body="\n".join(" " * 8 + s for s in body),
        pre="".join("\n        " + s for s, on in [
            ("if (i == 0) __trap();", bad == "crash"),
            ("const int64_t c = (i / inner) % channels;", "[c]" in " ".join(body))] if on),
        kparams="".join(f",\n{' ' * 27}const float* __restrict__ {p}" for p in chans)
        + "".join(f",\n{' ' * 27}float {s}" for s in scalars),
        kargs="".join(f",\n        {p}.data_ptr<float>()" for p in chans)
        + "".join(f",\n        (float){s}" for s in scalars),
        hparams="".join(f", torch::Tensor {p}" for p in chans)
        + "".join(f", double {s}" for s in scalars),
        checks="".join(PARAM_CHECK.format(p=p) for p in chans))


def tail_decl(spec: dict) -> str:
    return ("torch::Tensor run(torch::Tensor y" + "".join(f", torch::Tensor {p}" for p in spec["chans"])
            + "".join(f", double {s}" for s in spec["scalars"]) + ");")
