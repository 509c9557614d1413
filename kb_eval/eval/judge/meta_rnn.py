"""Recurrent layers on the meta device, for the memory plan and the work count: nn.RNN/
LSTM/GRU have no meta kernel (decomposed, 10-20 s for a deep GRU), so each answers with
empty outputs of the right shapes and adds its matmuls' FLOPs to a tally."""

from __future__ import annotations

import torch
from torch import nn


GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def shape_only_rnns(model: nn.Module, flops: list[int] | None = None) -> int:
    """Make every recurrent layer of `model` (a meta-device copy: its forward is replaced
    for good) answer with its outputs' shapes, appending each call's matmul FLOPs to
    `flops` when given; how many layers were so replaced."""
    layers = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    for layer in layers:
        layer.forward = _ShapeOnly(layer, flops)
    return len(layers)


def rnn_flops(layer: nn.RNNBase, steps: int, batch: int) -> int:
    """The FLOPs of the input and hidden matmuls (and LSTM's projection) over `steps`:
    what FlopCounterMode counts when the layer runs decomposed (biases not counted)."""
    directions = 2 if layer.bidirectional else 1
    hidden, proj = layer.hidden_size, layer.proj_size
    out = proj or hidden
    gates = GATES[layer.mode] * hidden
    total = 0
    for n in range(layer.num_layers):
        inputs = layer.input_size if n == 0 else directions * out
        per_step = gates * (inputs + out) + (hidden * proj if proj else 0)
        total += directions * 2 * batch * steps * per_step
    return total


class _ShapeOnly:
    """The outputs of `layer(input, hx)` as `torch.nn` documents them, as empty tensors
    on the input's device (meta)."""

    def __init__(self, layer: nn.RNNBase, flops: list[int] | None = None):
        self.layer, self.flops = layer, flops

    def __call__(self, input: torch.Tensor, hx=None):
        layer = self.layer
        if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3):
            raise TypeError("a recurrent layer's input of this kind has no shape rule here")
        batched = input.dim() == 3
        steps = input.shape[1] if batched and layer.batch_first else input.shape[0]
        batch = (input.shape[0] if layer.batch_first else input.shape[1]) if batched else None
        directions = 2 if layer.bidirectional else 1
        out_size = layer.proj_size or layer.hidden_size  # proj_size: LSTM only, 0 when unused
        if self.flops is not None:
            self.flops.append(rnn_flops(layer, steps, batch or 1))

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
