"""Writes the throughput corpus: realistic candidates over KernelBench level-1 problems,
the kinds a model writes, for benchmarks/eval_throughput.py --corpus (issue 15).

    python benchmarks/corpus/make_corpus.py /tmp/kb_corpus    # writes 62 candidate files
    python benchmarks/eval_throughput.py --corpus /tmp/kb_corpus --source ../shared/kernelbench

Per elementwise problem (ReLU ... HardTanh, 12 of them), five candidates:
  sample 0  PyTorch-only rewrite (other ops, same values)
  sample 1  load_inline CUDA kernel, built at import (the build stage compiles it)
  sample 2  Triton kernel
  sample 3  load_inline CUDA compiled lazily in the first forward (the child compiles it,
            inside the load budget)
  sample 4  a bad one, by problem: slow (a launch per row), crashing (a device trap),
            or wrong (the last element never written)
plus PyTorch rewrites of Softmax and LogSoftmax (23, 24). The files are written, not
committed: they repeat one another by design, as a model's samples do.
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


def candidates() -> dict[str, str]:
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


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py OUT_DIR (the folder to write the candidates to)")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in candidates().items():
        (out / name).write_text("\n".join(ln.rstrip() for ln in text.splitlines()) + "\n")
    print(f"wrote {len(candidates())} candidates to {out}")


if __name__ == "__main__":
    main()
