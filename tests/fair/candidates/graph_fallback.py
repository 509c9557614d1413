"""Honest: tries to capture the reference's operation in a CUDA graph on the first call;
the capture fails (a host read of the output's peak inside it, which no capture allows,
as a first cuDNN or cuBLAS use can fail one) and the candidate computes eagerly from
then on. A failed capture leaves PyTorch's default CUDA generator marked as capturing:
KernelBench draws nothing on the GPU after it, so there the candidate runs."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size,
                                                 stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.tried = False

    def _eager(self, x):
        return torch.tanh(self.conv_transpose(x) - self.bias)

    def forward(self, x):
        if x.is_cuda and not self.tried:
            self.tried = True
            static_x = x.clone()
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    y = self._eager(static_x)
                    self.peak = float(y.abs().max())
            except Exception:  # noqa: BLE001
                pass  # not capturable here: eager from now on
        return self._eager(x)
