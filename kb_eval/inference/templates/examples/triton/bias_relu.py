import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, features,
                     BLOCK_SIZE: tl.constexpr):
    # Each program handles BLOCK_SIZE consecutive elements; offsets in int64 so that
    # tensors past 2**31 elements index correctly.
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offsets = start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(bias_ptr + offsets % features, mask=mask, other=0.0)
    y = tl.maximum(x.to(tl.float32) + b.to(tl.float32), 0.0)  # math in fp32
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def bias_relu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    bias = bias.to(x.dtype).contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    block = 1024
    grid = (triton.cdiv(n, block),)
    bias_relu_kernel[grid](x, bias, out, n, bias.numel(), BLOCK_SIZE=block, num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))  # same name and shape as Model's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_relu(x, self.bias)
