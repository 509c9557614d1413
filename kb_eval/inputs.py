"""Precision and inputs: the same rules for the reference and the candidate.

Inputs are drawn from a seed directly on the target device (`get_inputs()` runs under
`torch.device(dev)`, so KernelBench's plain `torch.randn(...)` calls allocate on the GPU:
no host-side generation and copy of hundreds of MB). Floating inputs and the model are cast
to the run's precision; fp32 runs with TF32 off, so fp32 means fp32.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Callable

import torch

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Default tolerances per precision (atol, rtol); the eval config may override them.
# bf16 keeps 3 fewer mantissa bits than fp16: one rounding step of an output near 2 is
# already 0.0156, and two correct bf16 implementations (ours vs eager) differ by that on
# a few elements per million, so 1e-2 there would judge rounding, not correctness.
TOLERANCES = {"fp32": (1e-4, 1e-4), "fp16": (1e-2, 1e-2), "bf16": (2e-2, 2e-2)}


def precision_dtype(precision: str) -> torch.dtype:
    try:
        return PRECISIONS[precision]
    except KeyError:
        from kb_eval.errors import UserError
        raise UserError(f"unknown precision {precision!r}: use one of {list(PRECISIONS)}") from None


def set_precision_flags(precision: str) -> None:
    """fp32 is real fp32: no TF32 in matmuls or convolutions."""
    precision_dtype(precision)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def derive_seed(secret: int, *parts: Any) -> int:
    """A 63-bit seed from a secret and labels (problem key, trial): independent streams."""
    h = hashlib.sha256(repr((secret, *parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def cast_tree(x: Any, dtype: torch.dtype) -> Any:
    """Cast floating tensors (in lists/tuples) to dtype; leave ints, bools and others."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(cast_tree(v, dtype) for v in x)
    return x


def seed_for(device: str | torch.device, seed: int) -> None:
    """Seed the generators that draw on `device`: the CPU's (a `get_inputs` may draw there
    too) and, on a GPU, that device's. Not torch.manual_seed: it also queues a seed for
    every accelerator not yet started, formatting a stack trace for each (0.5 ms a draw on
    the 2-core CPU; on the H100, XPU's and MTIA's made 45 ms of each sample's timing step,
    both sides' draws, py-spy), and seeds every GPU where a child sees one. The same
    generators get the same seed, so the inputs are those torch.manual_seed gave."""
    dev = torch.device(device)
    torch.default_generator.manual_seed(seed)
    if dev.type == "cuda" and torch.cuda.is_initialized():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)
    elif dev.type != "cpu":  # CUDA not started yet (its first draw), or another device
        torch.manual_seed(seed)


def make_inputs(get_inputs: Callable[[], list], seed: int, device: str | torch.device,
                dtype: torch.dtype) -> list:
    """Seeded inputs created on `device`, floats cast to `dtype`."""
    seed_for(device, seed)
    with torch.device(device):
        inputs = get_inputs()
    return [cast_tree(x, dtype) for x in inputs]


def make_init_inputs(get_init_inputs: Callable[[], list], device) -> list:
    with torch.device(device):
        return list(get_init_inputs())


def build_model(cls: type, init_inputs: list, seed: int, device, dtype: torch.dtype,
                reference_state: dict | None = None) -> torch.nn.Module:
    """Construct under a fixed seed (KernelBench's rule for matching weights), then copy
    the reference's weights when the parameter sets agree (robust to init order)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*init_inputs)
    if reference_state is not None:
        own = model.state_dict()
        if own.keys() == reference_state.keys() and all(
                own[k].shape == reference_state[k].shape for k in own):
            model.load_state_dict(reference_state)
    return model.to(device=device, dtype=dtype).eval()


def copy_tree(x: Any) -> Any:
    """Fresh copies of tensors, so a callee cannot touch the caller's inputs."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(copy_tree(v) for v in x)
    return x


@contextlib.contextmanager
def widened(model: torch.nn.Module, dtype: torch.dtype):
    """`model` in float64 for the duration, then in `dtype` again, with the tensors that
    its modules hold as plain attributes (not parameters or buffers: `.to` leaves them
    alone) put back as they were: a stateful reference (KernelBench level3/33 keeps its
    RNN hidden state so) would otherwise keep a float64 state from the widened call and
    fail every later call at its own precision."""
    plain = [(m, k, v) for m in model.modules() for k, v in vars(m).items()
             if isinstance(v, torch.Tensor)]
    model.to(torch.float64)  # widening the rounded weights is exact, as is narrowing
    try:
        yield model
    finally:
        model.to(dtype)
        for m, k, v in plain:
            setattr(m, k, v)
