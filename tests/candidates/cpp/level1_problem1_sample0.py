# correct: a C++ (CPU) kernel built with load_inline
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    const float* b = yc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = 2.0f * a[i] + b[i];
    return out;
}
"""

ext = load_inline("kb_test_scale_add", cpp_sources=SOURCE, functions=["scale_add"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return ext.scale_add(x, y)
