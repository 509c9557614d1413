"""Recurrent layers on the meta device, for the memory plan: nn.RNN/LSTM/GRU have no meta
kernel (decomposed, seconds for a deep LSTM), so each answers with empty outputs of the
right shapes."""

from __future__ import annotations

import torch
from torch import nn


def shape_only_rnns(model: nn.Module) -> int:
    """Replace every recurrent layer's forward of meta-device `model`; how many."""
    layers = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    for layer in layers:
        layer.forward = _ShapeOnly(layer)
    return len(layers)


class _ShapeOnly:
    """The outputs of `layer(input, hx)`, as empty tensors on the input's device."""

    def __init__(self, layer: nn.RNNBase):
        self.layer = layer

    def __call__(self, input: torch.Tensor, hx=None):
        layer = self.layer
        if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3):
            raise TypeError("a recurrent layer's input of this kind has no shape rule here")
        batched = input.dim() == 3
        steps = input.shape[1] if batched and layer.batch_first else input.shape[0]
        batch = (input.shape[0] if layer.batch_first else input.shape[1]) if batched else None
        directions = 2 if layer.bidirectional else 1
        out_size = layer.proj_size or layer.hidden_size  # proj_size: LSTM only, 0 when unused

        def empty(*shape: int | None) -> torch.Tensor:
            return input.new_empty([n for n in shape if n is not None])

        if batched and layer.batch_first:
            output = empty(batch, steps, directions * out_size)
        else:
            output = empty(steps, batch, directions * out_size)
        h_n = empty(directions * layer.num_layers, batch, out_size)
        if isinstance(layer, nn.LSTM):
            return output, (h_n, empty(directions * layer.num_layers, batch, layer.hidden_size))
        return output, h_n
