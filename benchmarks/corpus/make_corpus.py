"""Writes the throughput corpus: realistic candidates over KernelBench level-1 and level-2
problems, the kinds a model writes, for benchmarks/eval_throughput.py --corpus (issue 15).

    python benchmarks/corpus/make_corpus.py /tmp/kb_corpus    # writes 112 candidate files
    python benchmarks/eval_throughput.py --corpus /tmp/kb_corpus --source ../shared/kernelbench

Level 1 (62 files). Per elementwise problem (ReLU ... HardTanh, 12 of them), five candidates:
  sample 0  PyTorch-only rewrite (other ops, same values)
  sample 1  load_inline CUDA kernel, built at import (the build stage compiles it)
  sample 2  Triton kernel
  sample 3  load_inline CUDA compiled lazily in the first forward (the child compiles it,
            inside the load budget)
  sample 4  a bad one, by problem: slow (a launch per row), crashing (a device trap),
            or wrong (the last element never written)
plus PyTorch rewrites of Softmax and LogSoftmax (23, 24).

Level 2 (50 files): 10 problems whose forward is one Conv2d / Conv3d / ConvTranspose2d /
ConvTranspose3d / Linear followed by an elementwise tail (activations, scalars, per-channel
parameters), five candidates each, of the same kinds: sample 0 rewrites the tail in
PyTorch; samples 1-3 keep the conv/GEMM module (same attribute, so the reference's weights
load) and fuse the whole tail into one kernel (CUDA at import, Triton, CUDA lazily), the
per-channel parameters passed as tensors and read at channel (i / inner) % channels;
sample 4 is slow (the tail one batch row at a time: the Linear problems), crashing (a
device trap) or wrong (a layout bug, ops in the wrong order, dividing by the scale).

The files are written, not committed: they repeat one another by design, as a model's
samples do.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# problem id -> (name, PyTorch rewrite, CUDA expression of v and p, Triton expression,
#                default p, the bad kind)
OPS = {
    19: ("ReLU", "torch.clamp_min(x, 0.0)", "fmaxf(v, 0.f)", "tl.maximum(v, 0.0)",
         0.0, "slow"),
    20: ("LeakyReLU", "torch.where(x > 0, x, x * self.p)", "v > 0.f ? v : v * p",
         "tl.where(v > 0, v, v * p)", 0.01, "crash"),
    21: ("Sigmoid", "1.0 / (1.0 + torch.exp(-x))", "1.f / (1.f + expf(-v))",
         "1.0 / (1.0 + tl.exp(-v))", 0.0, "wrong"),
    22: ("Tanh", "2.0 * torch.sigmoid(2.0 * x) - 1.0", "tanhf(v)",
         "2.0 / (1.0 + tl.exp(-2.0 * v)) - 1.0", 0.0, "slow"),
    25: ("Swish", "x / (1.0 + torch.exp(-x))", "v / (1.f + expf(-v))",
         "v / (1.0 + tl.exp(-v))", 0.0, "crash"),
    26: ("GELU_", "0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))",
         "0.5f * v * (1.f + erff(v * 0.70710678118654752f))", None, 0.0, "wrong"),
    27: ("SELU_", "1.0507009873554805 * torch.where(x > 0, x, 1.6732632423543772 * "
         "torch.expm1(x))", "1.0507009873554805f * (v > 0.f ? v : 1.6732632423543772f * "
         "expm1f(v))", "1.0507009873554805 * tl.where(v > 0, v, 1.6732632423543772 * "
         "(tl.exp(v) - 1.0))", 0.0, "slow"),
    28: ("HardSigmoid", "torch.clamp(x / 6.0 + 0.5, 0.0, 1.0)",
         "fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f)",
         "tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)", 0.0, "crash"),
    29: ("Softplus", "torch.where(x > 20.0, x, torch.log1p(torch.exp(x)))",
         "v > 20.f ? v : log1pf(expf(v))", "tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
         0.0, "wrong"),
    30: ("Softsign", "x / (1.0 + x.abs())", "v / (1.f + fabsf(v))",
         "v / (1.0 + tl.abs(v))", 0.0, "slow"),
    31: ("ELU", "torch.where(x > 0, x, self.p * torch.expm1(x))",
         "v > 0.f ? v : p * expm1f(v)", "tl.where(v > 0, v, p * (tl.exp(v) - 1.0))", 1.0,
         "crash"),
    32: ("HardTanh", "torch.clamp(x, -1.0, 1.0)", "fminf(fmaxf(v, -1.f), 1.f)",
         "tl.minimum(tl.maximum(v, -1.0), 1.0)", 0.0, "wrong"),
}

HEAD = '''import torch
import torch.nn as nn

P_DEFAULT = {p!r}


class Base(nn.Module):
    def __init__(self, *init):
        super().__init__()
        self.p = float(init[0]) if init else P_DEFAULT
'''

TORCH = HEAD + '''

class ModelNew(Base):
    def forward(self, x):
        return {expr}
'''

SLOW = HEAD + '''

class ModelNew(Base):
    def forward(self, x):
        # one small launch per row: correct, and slow
        rows = x.reshape(x.shape[0], -1)
        out = torch.empty_like(rows)
        for i in range(rows.shape[0]):
            r = rows[i]
            out[i] = {row_expr}
        return out.reshape(x.shape)
'''

CUDA_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void op_{tag}(const float* __restrict__ x, float* __restrict__ out, int64_t n,
                        float p) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    {guard}
    if (i < n{limit}) {{
        float v = x[i];
        out[i] = {expr};
    }}
}}

torch::Tensor run(torch::Tensor x, double p) {{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32);
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    op_{tag}<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, (float)p);
    return out;
}}
"""

CUDA = HEAD + '''from torch.utils.cpp_extension import load_inline

SOURCE = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor run(torch::Tensor x, double p);",
                  cuda_sources=SOURCE, functions=["run"], verbose=False)


class ModelNew(Base):
    def forward(self, x):
        return ext.run(x.contiguous(), self.p)
'''

LAZY = HEAD + '''from torch.utils.cpp_extension import load_inline

SOURCE = r"""{src}"""
_ext = []


class ModelNew(Base):
    def forward(self, x):
        if not _ext:  # compiled on first use, as many generated candidates do
            _ext.append(load_inline(name="{name}",
                                    cpp_sources="torch::Tensor run(torch::Tensor x, double p);",
                                    cuda_sources=SOURCE, functions=["run"], verbose=False))
        return _ext[0].run(x.contiguous(), self.p)
'''

TRITON = HEAD + '''import triton
import triton.language as tl


@triton.jit
def _op(x_ptr, out_ptr, n, p, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, {expr}, mask=mask)


class ModelNew(Base):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _op[(triton.cdiv(n, 1024),)](x, out, n, self.p, BLOCK=1024)
        return out
'''

SOFTMAX = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *init):
        super().__init__()
        self.dim = int(init[0]) if init else 1

    def forward(self, x):
        shifted = x - x.amax(dim=self.dim, keepdim=True)
        {body}
'''


def cuda_source(pid: int, expr: str, bad: str | None = None) -> str:
    guard = "if (i == 0) __trap();" if bad == "crash" else ""
    limit = " - 1" if bad == "wrong" else ""
    return CUDA_SRC.format(tag=f"p{pid}", expr=expr, guard=guard, limit=limit)


def l1_candidates() -> dict[str, str]:
    files = {}
    for pid, (name, torch_expr, cuda_expr, triton_expr, p, bad) in OPS.items():
        head = {"p": p}
        stem = f"level1_problem{pid}_sample"
        files[f"{stem}0.py"] = TORCH.format(expr=torch_expr, **head)
        files[f"{stem}1.py"] = CUDA.format(src=cuda_source(pid, cuda_expr),
                                           name=f"kbc_{name.lower()}_import", **head)
        if triton_expr:
            files[f"{stem}2.py"] = TRITON.format(expr=triton_expr, **head)
        else:  # erf in Triton differs between versions: a second PyTorch rewrite
            files[f"{stem}2.py"] = TORCH.format(
                expr="x * 0.5 * torch.erfc(-x * 0.7071067811865476)", **head)
        files[f"{stem}3.py"] = LAZY.format(src=cuda_source(pid, cuda_expr),
                                           name=f"kbc_{name.lower()}_lazy", **head)
        if bad == "slow":
            files[f"{stem}4.py"] = SLOW.format(row_expr=re.sub(r"\bx\b", "r", torch_expr), **head)
        else:
            files[f"{stem}4.py"] = CUDA.format(src=cuda_source(pid, cuda_expr, bad),
                                               name=f"kbc_{name.lower()}_{bad}", **head)
    files["level1_problem23_sample0.py"] = SOFTMAX.format(
        body="e = shifted.exp()\n        return e / e.sum(dim=self.dim, keepdim=True)")
    files["level1_problem24_sample0.py"] = SOFTMAX.format(
        body="return shifted - shifted.exp().sum(dim=self.dim, keepdim=True).log()")
    return files


# ---- level 2: a conv / GEMM, then an elementwise tail ---------------------------------
# Per problem: the reference's constructor (args, layers: the same attributes, so the
# state_dict keys and shapes match), the conv/GEMM call (op), and the tail in three
# languages, as statements: PyTorch on the op's output `y` (leaving the result in y),
# CUDA and Triton on one element `v`. chans: per-channel parameters (C values, C = dim 1
# of the output), which the kernels read at c = (i / inner) % C; scalars: kernel argument
# name -> the Python value passed. bad: sample 4's kind; wrong: its CUDA tail when wrong.
L2 = {
    1: dict(name="Conv2D_ReLU_BiasAdd", args="in_channels, out_channels, kernel_size, bias_shape",
            layers=["self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)",
                    "self.bias = nn.Parameter(torch.randn(bias_shape))"],
            op="self.conv(x)", chans=["bias"], scalars={},
            torch=["y = torch.clamp_min(y, 0.0) + self.bias"],
            cuda=["v = fmaxf(v, 0.f) + bias[c];"],
            triton=["v = tl.maximum(v, 0.0) + bias"],
            bad="wrong", wrong=["v = fmaxf(v, 0.f) + bias[i % channels];"]),  # NHWC's channel
    12: dict(name="Gemm_Multiply_LeakyReLU",
             args="in_features, out_features, multiplier, negative_slope",
             layers=["self.gemm = nn.Linear(in_features, out_features)",
                     "self.multiplier = multiplier",
                     "self.leaky_relu = nn.LeakyReLU(negative_slope)"],
             op="self.gemm(x)", chans=[],
             scalars={"multiplier": "self.multiplier", "slope": "self.leaky_relu.negative_slope"},
             torch=["z = y * self.multiplier",
                    "y = torch.where(z > 0, z, z * self.leaky_relu.negative_slope)"],
             cuda=["v *= multiplier;", "v = v > 0.f ? v : v * slope;"],
             triton=["v = v * multiplier", "v = tl.where(v > 0, v, v * slope)"],
             bad="slow"),
    16: dict(name="ConvTranspose2d_Mish_Add_Hardtanh_Scaling",
             args="in_channels, out_channels, kernel_size, stride, padding, output_padding, "
                  "add_value, scale",
             layers=["self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, "
                     "kernel_size, stride, padding, output_padding)",
                     "self.add_value = add_value", "self.scale = scale"],
             op="self.conv_transpose(x)", chans=[],
             scalars={"add_value": "self.add_value", "scale": "self.scale"},
             torch=["z = y * F.softplus(y).tanh() + self.add_value",  # Mish, then add
                    "y = z.clamp(-1.0, 1.0) * self.scale"],
             cuda=["float sp = v > 20.f ? v : log1pf(expf(v));",
                   "v = fminf(fmaxf(v * tanhf(sp) + add_value, -1.f), 1.f) * scale;"],
             triton=["sp = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
                     "v = v * (2.0 * tl.sigmoid(2.0 * sp) - 1.0) + add_value",
                     "v = tl.minimum(tl.maximum(v, -1.0), 1.0) * scale"],
             bad="wrong", wrong=["float sp = v > 20.f ? v : log1pf(expf(v));",
                                 "v = fminf(fmaxf(v * tanhf(sp) + add_value, -1.f), 1.f);",
                                 "v /= scale;"]),  # divided by the scale, not multiplied
    20: dict(name="ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd",
             args="in_channels, out_channels, kernel_size, stride, padding, output_padding, "
                  "bias_shape",
             layers=["self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, "
                     "kernel_size, stride=stride, padding=padding, output_padding=output_padding)",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.conv_transpose(x)", chans=["bias"], scalars={},
             torch=["y = torch.addcmul(y, y + self.bias + y, y)"],  # ((y + b) + y) * y + y
             cuda=["v = fmaf(v + bias[c] + v, v, v);"],
             triton=["v = (v + bias + v) * v + v"],
             bad="crash"),
    47: dict(name="Conv3d_Mish_Tanh",
             args="in_channels, out_channels, kernel_size, stride=1, padding=0",
             layers=["self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, "
                     "stride=stride, padding=padding)"],
             op="self.conv(x)", chans=[], scalars={},
             torch=["y = torch.tanh(y * torch.tanh(F.softplus(y)))"],
             cuda=["float sp = v > 20.f ? v : log1pf(expf(v));", "v = tanhf(v * tanhf(sp));"],
             triton=["sp = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(v)))",
                     "v = v * (2.0 * tl.sigmoid(2.0 * sp) - 1.0)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0"],
             bad="wrong", wrong=["v = tanhf(v);",  # tanh before Mish: the order swapped
                                 "v = v * tanhf(log1pf(expf(v)));"]),
    48: dict(name="Conv3d_Scaling_Tanh_Multiply_Sigmoid",
             args="in_channels, out_channels, kernel_size, scaling_factor, bias_shape",
             layers=["self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)",
                     "self.scaling_factor = nn.Parameter(torch.randn(bias_shape))",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.conv(x)", chans=["scaling_factor", "bias"], scalars={},
             torch=["t = torch.tanh(y * self.scaling_factor) * self.bias",
                    "y = 0.5 + 0.5 * torch.tanh(0.5 * t)"],  # sigmoid(t)
             cuda=["v = tanhf(v * scaling_factor[c]) * bias[c];", "v = 1.f / (1.f + expf(-v));"],
             triton=["v = tl.sigmoid((2.0 * tl.sigmoid(2.0 * v * scaling_factor) - 1.0) * bias)"],
             bad="crash"),
    57: dict(name="Conv2d_ReLU_HardSwish", args="in_channels, out_channels, kernel_size",
             layers=["self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)"],
             op="self.conv(x)", chans=[], scalars={},
             torch=["y = F.hardswish(torch.relu(y))"],
             cuda=["v = fmaxf(v, 0.f);", "v = v * fminf((v + 3.f) / 6.f, 1.f);"],
             triton=["v = tl.maximum(v, 0.0)", "v = v * tl.minimum((v + 3.0) / 6.0, 1.0)"],
             bad="crash"),
    76: dict(name="Gemm_Add_ReLU", args="in_features, out_features, bias_shape",
             layers=["self.gemm = nn.Linear(in_features, out_features, bias=False)",
                     "self.bias = nn.Parameter(torch.randn(bias_shape))"],
             op="self.gemm(x)", chans=["bias"], scalars={},
             torch=["y = (y + self.bias).clamp_min(0.0)"],
             cuda=["v = fmaxf(v + bias[c], 0.f);"],
             triton=["v = tl.maximum(v + bias, 0.0)"],
             bad="slow"),
    81: dict(name="Gemm_Swish_Divide_Clamp_Tanh_Clamp",
             args="in_features, out_features, bias=True",
             layers=["self.gemm = nn.Linear(in_features, out_features, bias=bias)"],
             op="self.gemm(x)", chans=[], scalars={},
             # tanh of [-1, 1] stays in [-1, 1]: the reference's last clamp changes nothing
             torch=["y = torch.tanh((0.5 * y * torch.sigmoid(y)).clamp(-1.0, 1.0))"],
             cuda=["v = 0.5f * v / (1.f + expf(-v));", "v = tanhf(fminf(fmaxf(v, -1.f), 1.f));"],
             triton=["v = tl.minimum(tl.maximum(0.5 * v * tl.sigmoid(v), -1.0), 1.0)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0"],
             bad="crash"),
    95: dict(name="Matmul_Add_Swish_Tanh_GELU_Hardtanh",
             args="in_features, out_features, add_value_shape",
             layers=["self.matmul = nn.Linear(in_features, out_features)",
                     "self.add_value = nn.Parameter(torch.randn(add_value_shape))"],
             op="self.matmul(x)", chans=["add_value"], scalars={},
             torch=["z = F.silu(y + self.add_value)",
                    "y = F.gelu(torch.tanh(z)).clamp(-1.0, 1.0)"],
             cuda=["v += add_value[c];", "v = tanhf(v / (1.f + expf(-v)));",
                   "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
                   "v = fminf(fmaxf(v, -1.f), 1.f);"],
             triton=["v = v + add_value", "v = v * tl.sigmoid(v)",
                     "v = 2.0 * tl.sigmoid(2.0 * v) - 1.0",
                     "v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))",
                     "v = tl.minimum(tl.maximum(v, -1.0), 1.0)"],
             bad="slow"),
}

L2_HEAD = """import torch
import torch.nn as nn
import torch.nn.functional as F
{imports}

class Base(nn.Module):
    def __init__(self, {args}):
        super().__init__()
{layers}
"""

L2_TORCH = L2_HEAD + """

class ModelNew(Base):
    def forward(self, x):
        y = {op}
{body}
        return y
"""

L2_SLOW = L2_HEAD + """

class ModelNew(Base):
    def forward(self, x):
        y = {op}
        out = torch.empty_like(y)
        for i in range(y.shape[0]):  # the tail one batch row at a time: correct, and slow
            r = y[i]
{row_body}
            out[i] = r
        return out
"""

L2_CUDA_SRC = r"""
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

L2_PARAM_CHECK = """
    TORCH_CHECK({p}.is_cuda() && {p}.is_contiguous(), "{p}: a contiguous CUDA tensor");
    TORCH_CHECK({p}.scalar_type() == torch::kFloat32 && {p}.numel() == channels,
                "{p}: one float32 value per channel");"""

L2_CUDA = L2_HEAD + '''

SOURCE = r"""{src}"""
DECL = "{decl}"
ext = load_inline(name="{name}", cpp_sources=DECL, cuda_sources=SOURCE, functions=["run"],
                  verbose=False)


class ModelNew(Base):
    def forward(self, x):
        return ext.run({op}.contiguous(){call})
'''

L2_LAZY = L2_HEAD + '''

SOURCE = r"""{src}"""
DECL = "{decl}"
_ext = []


class ModelNew(Base):
    def forward(self, x):
        if not _ext:  # compiled on first use, as many generated candidates do
            _ext.append(load_inline(name="{name}", cpp_sources=DECL, cuda_sources=SOURCE,
                                    functions=["run"], verbose=False))
        return _ext[0].run({op}.contiguous(){call})
'''

L2_TRITON = L2_HEAD + """

@triton.jit
def _tail(y_ptr, out_ptr, n, inner, channels, {tparams}BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask)
{body}
    tl.store(out_ptr + offs, v, mask=mask)


class ModelNew(Base):
    def forward(self, x):
        y = {op}.contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        channels = y.shape[1]
        inner = n // (y.shape[0] * channels)
        _tail[(triton.cdiv(n, 1024),)](
            y, out, n, inner, channels, {targs}BLOCK=1024)
        return out
"""

LOAD_INLINE = "from torch.utils.cpp_extension import load_inline\n"
TRITON_IMPORTS = "import triton\nimport triton.language as tl\n"


def _lines(stmts: list[str], indent: int) -> str:
    return "\n".join(" " * indent + s for s in stmts)


def l2_cuda_source(pid: int, spec: dict, bad: str | None = None) -> str:
    chans, scalars = spec["chans"], spec["scalars"]
    body = spec["wrong"] if bad == "wrong" else spec["cuda"]
    return L2_CUDA_SRC.format(
        tag=f"l2p{pid}", body=_lines(body, 8),
        pre="".join("\n        " + s for s, on in [
            ("if (i == 0) __trap();", bad == "crash"),
            ("const int64_t c = (i / inner) % channels;", "[c]" in " ".join(body))] if on),
        kparams="".join(f",\n{' ' * 26}const float* __restrict__ {p}" for p in chans)
        + "".join(f",\n{' ' * 26}float {s}" for s in scalars),
        kargs="".join(f",\n        {p}.data_ptr<float>()" for p in chans)
        + "".join(f",\n        (float){s}" for s in scalars),
        hparams="".join(f", torch::Tensor {p}" for p in chans)
        + "".join(f", double {s}" for s in scalars),
        checks="".join(L2_PARAM_CHECK.format(p=p) for p in chans))


def l2_candidates() -> dict[str, str]:
    files = {}
    for pid, spec in L2.items():
        chans, scalars = spec["chans"], spec["scalars"]
        head = {"args": spec["args"], "layers": _lines(spec["layers"], 8), "op": spec["op"]}
        decl = ("torch::Tensor run(torch::Tensor y" + "".join(f", torch::Tensor {p}" for p in chans)
                + "".join(f", double {s}" for s in scalars) + ");")
        call = ("".join(f", self.{p}" for p in chans)
                + "".join(f", float({v})" for v in scalars.values()))

        def cuda(template: str, kind: str, bad: str | None = None) -> str:
            return template.format(src=l2_cuda_source(pid, spec, bad), name=f"kbc_l2p{pid}_{kind}",
                                   decl=decl, call=call, imports=LOAD_INLINE, **head)

        stem = f"level2_problem{pid}_sample"
        files[f"{stem}0.py"] = L2_TORCH.format(body=_lines(spec["torch"], 8), imports="", **head)
        files[f"{stem}1.py"] = cuda(L2_CUDA, "import")
        loads = ["c = (offs // inner) % channels"] * bool(chans) + [
            f"{p} = tl.load({p}_ptr + c, mask=mask)" for p in chans]
        files[f"{stem}2.py"] = L2_TRITON.format(
            body=_lines(loads + spec["triton"], 4), imports=TRITON_IMPORTS,
            tparams="".join(f"{p}_ptr, " for p in chans) + "".join(f"{s}, " for s in scalars),
            targs="".join(f"self.{p}, " for p in chans)
            + "".join(f"float({v}), " for v in scalars.values()), **head)
        files[f"{stem}3.py"] = cuda(L2_LAZY, "lazy")
        if spec["bad"] == "slow":
            rows = [re.sub(r"\by\b", "r", s) for s in spec["torch"]]
            files[f"{stem}4.py"] = L2_SLOW.format(row_body=_lines(rows, 12), imports="", **head)
        else:
            files[f"{stem}4.py"] = cuda(L2_CUDA, spec["bad"], spec["bad"])
    return files


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py OUT_DIR (the folder to write the candidates to)")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    files = {**l1_candidates(), **l2_candidates()}
    for name, text in files.items():
        (out / name).write_text("\n".join(ln.rstrip() for ln in text.splitlines()) + "\n")
    print(f"wrote {len(files)} candidates to {out}")


if __name__ == "__main__":
    main()
