# CUDA, correct
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>

__global__ void scale_add_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    scale_add_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), yc.data_ptr<float>(),
                                          out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline("kb_test_cuda_scale_add", cpp_sources="torch::Tensor scale_add(torch::Tensor x, torch::Tensor y);",
                  cuda_sources=CUDA_SOURCE, functions=["scale_add"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return ext.scale_add(x, y)
