# CUDA, illegal memory access: writes through a bogus pointer
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>

__global__ void bad_kernel(const float* x, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    float* bogus = reinterpret_cast<float*>(0x10);
    if (i < n) bogus[i] = x[i];
}

torch::Tensor bad(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    bad_kernel<<<(int)((n + 255) / 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline("kb_test_cuda_bad", cpp_sources="torch::Tensor bad(torch::Tensor x, torch::Tensor y);",
                  cuda_sources=CUDA_SOURCE, functions=["bad"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.bad(x, y)
