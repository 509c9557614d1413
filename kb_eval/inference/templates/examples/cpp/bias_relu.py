import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// Rows are split across threads by at::parallel_for; the inner loop over features is
// contiguous and branch-free, so the compiler vectorizes it for float.
torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.device().is_cpu() && bias.device().is_cpu(), "bias_relu: expected CPU tensors");
    TORCH_CHECK(x.size(-1) == bias.numel(), "bias_relu: bias must match the last dimension");
    auto xc = x.contiguous();
    auto bc = bias.to(x.scalar_type()).contiguous();
    auto out = torch::empty_like(xc);
    const int64_t features = bc.numel();
    const int64_t rows = features == 0 ? 0 : xc.numel() / features;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16,
                                    xc.scalar_type(), "bias_relu", [&] {
        const scalar_t* xp = xc.data_ptr<scalar_t>();
        const scalar_t* bp = bc.data_ptr<scalar_t>();
        scalar_t* op = out.data_ptr<scalar_t>();
        at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const scalar_t* x_row = xp + r * features;
                scalar_t* out_row = op + r * features;
                for (int64_t c = 0; c < features; ++c) {
                    const float v = static_cast<float>(x_row[c]) + static_cast<float>(bp[c]);
                    out_row[c] = static_cast<scalar_t>(v > 0.0f ? v : 0.0f);
                }
            }
        });
    });
    return out;
}
"""

bias_relu_ext = load_inline(name="kb_example_bias_relu_cpp", cpp_sources=cpp_source,
                            functions=["bias_relu"], extra_cflags=["-O3", "-march=native"])


class ModelNew(nn.Module):
    """Keeps Model's parameter (same name and shape), so Model's weights load into it."""

    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_relu_ext.bias_relu(x, self.bias)
