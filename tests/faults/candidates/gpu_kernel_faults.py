"""Faults (GPU), one source for two problems so it compiles once: with two inputs
(ScaleAdd) a kernel writes through a null pointer (illegal memory access); with one input
(TransposeCopy) a kernel spins forever on a flag nobody sets."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>

__global__ void write_null(float* p) { p[threadIdx.x] = 1.0f; }
__global__ void spin(volatile int* flag) { while (*flag == 0) { } }

torch::Tensor illegal(torch::Tensor x) {
    write_null<<<1, 32>>>(nullptr);
    return x.clone();
}

torch::Tensor forever(torch::Tensor x) {
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt));
    spin<<<1, 1>>>(flag.data_ptr<int>());
    return x.clone();
}
"""
CPP = "torch::Tensor illegal(torch::Tensor x);\ntorch::Tensor forever(torch::Tensor x);"

ext = load_inline("kb_fault_gpu_kernels", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["illegal", "forever"])


class ModelNew(nn.Module):
    def forward(self, *args):
        if len(args) == 2:
            out = ext.illegal(args[0])
        else:
            out = ext.forever(args[0])
        torch.cuda.synchronize()
        return out
