# compile error in the C++ source (no implicit torch headers, so the compiler fails fast)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
float scale_add(float x, float y) {
    return x * 2 + y +;   // syntax error
}
"""

ext = load_inline("kb_test_scale_add_broken", cpp_sources=SOURCE, functions=["scale_add"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.scale_add(x, y)
