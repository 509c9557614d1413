import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// One thread per element, grid-stride loop; math in fp32 whatever the storage type.
template <typename scalar_t>
__global__ void bias_relu_kernel(const scalar_t* __restrict__ x,
                                 const scalar_t* __restrict__ bias,
                                 scalar_t* __restrict__ out,
                                 int64_t n, int64_t features) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = static_cast<float>(x[i]) + static_cast<float>(bias[i % features]);
        out[i] = static_cast<scalar_t>(v > 0.0f ? v : 0.0f);
    }
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "bias_relu: expected CUDA tensors");
    TORCH_CHECK(x.size(-1) == bias.numel(), "bias_relu: bias must match the last dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto bc = bias.to(x.scalar_type()).contiguous();
    auto out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 16384);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16,
                                    xc.scalar_type(), "bias_relu", [&] {
        bias_relu_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            xc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
            n, bc.numel());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias);"

bias_relu_ext = load_inline(
    name="kb_example_bias_relu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))  # same name and shape as Model's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_relu_ext.bias_relu(x, self.bias)
