"""Honest: the reference's operation captured in a CUDA graph on the first call (after a
warm-up on a side stream) and replayed on static buffers: each call copies its input in,
replays, and returns a copy of the output. Other shapes run eagerly."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size,
                                                 stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.graph = self.static_x = self.static_y = None

    def _eager(self, x):
        return torch.tanh(self.conv_transpose(x) - self.bias)

    def _capture(self, x):
        self.static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._eager(self.static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_y = self._eager(self.static_x)
        self.graph = graph

    def forward(self, x):
        if not x.is_cuda:
            return self._eager(x)
        if self.graph is None:
            self._capture(x)
        if x.shape != self.static_x.shape:
            return self._eager(x)
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y.clone()
