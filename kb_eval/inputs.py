"""Precision and inputs: the same rules for the reference and the candidate.

Inputs are drawn from a seed directly on the target device (`get_inputs()` runs under
`torch.device(dev)`). Floating inputs and the model are cast to the run's precision;
fp32 runs with TF32 off.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from typing import Any, Callable

import torch

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Default tolerances per precision (atol, rtol); the eval config may override them.
# bf16's rounding step near 2 is 0.0156, so 1e-2 there would judge rounding.
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


@contextlib.contextmanager
def seeded(device: str | torch.device, seed: int):
    """Draws inside the block come from `seed`, on the CPU's generator and, on a GPU, on a
    generator state of our own (never the state a candidate's CUDA graph registered). Draws
    what torch.manual_seed(seed) would, without its cost (docs/PERFORMANCE.md)."""
    dev = torch.device(device)
    torch.default_generator.manual_seed(seed)
    if dev.type == "cuda" and torch.cuda.is_initialized():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        default = torch.cuda.default_generators[index]
        own = _OWN_CUDA_STATES.get(index)
        if own is None:
            own = _OWN_CUDA_STATES[index] = torch.Generator(torch.device("cuda", index))
        own.manual_seed(seed)
        theirs = default.graphsafe_get_state()
        default.graphsafe_set_state(own)
        try:
            yield
        finally:
            default.graphsafe_set_state(theirs)
        return
    if dev.type != "cpu":  # CUDA not started yet (its first draw), or another device
        torch.manual_seed(seed)
    yield


# A generator per GPU for our draws (`seeded`); filled in place, never rebound (the
# tripwires compare this module's names by identity).
_OWN_CUDA_STATES: dict[int, torch.Generator] = {}


def make_inputs(get_inputs: Callable[[], list], seed: int, device: str | torch.device,
                dtype: torch.dtype) -> list:
    """Seeded inputs created on `device`, floats cast to `dtype`."""
    with seeded(device, seed), torch.device(device):
        inputs = get_inputs()
    return [cast_tree(x, dtype) for x in inputs]


def make_init_inputs(get_init_inputs: Callable[[], list], device) -> list:
    with torch.device(device):
        return list(get_init_inputs())


def build_model(cls: type, init_inputs: list, seed: int, device, dtype: torch.dtype,
                reference_state: dict | None = None) -> torch.nn.Module:
    """Construct on `device` under a fixed seed (KernelBench's rule for matching weights),
    then copy the reference's weights when the parameter sets agree. A module whose
    __init__ fails under `constructing_on` is constructed again under torch.device only."""
    torch.manual_seed(seed)
    try:
        with constructing_on(device):
            model = cls(*init_inputs)
    except Exception:
        if not _legacy_follows(device):
            raise
        torch.manual_seed(seed)
        with torch.device(device):
            model = cls(*init_inputs)
    if reference_state is not None:
        own = model.state_dict()
        if own.keys() == reference_state.keys() and all(
                own[k].shape == reference_state[k].shape for k in own):
            model.load_state_dict(reference_state)
    return model.to(device=device, dtype=dtype).eval()


# The legacy constructor's CUDA types, by default dtype (`constructing_on`).
_LEGACY_CUDA = {torch.float32: "torch.cuda.FloatTensor", torch.float64: "torch.cuda.DoubleTensor",
                torch.float16: "torch.cuda.HalfTensor", torch.bfloat16: "torch.cuda.BFloat16Tensor"}


def _legacy_follows(device) -> bool:
    return torch.device(device).type == "cuda" and hasattr(torch, "set_default_tensor_type")


@contextlib.contextmanager
def constructing_on(device):
    """Tensors a module makes while constructed land on `device` (on a GPU the legacy
    `torch.Tensor(n, m)` too), so a candidate's weights come from the reference's generator."""
    dev = torch.device(device)
    if not _legacy_follows(dev):
        with dev:
            yield
        return
    dtype = torch.get_default_dtype()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice
        torch.set_default_tensor_type(_LEGACY_CUDA.get(dtype, "torch.cuda.FloatTensor"))
    try:
        with torch.cuda.device(dev), dev:
            yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.set_default_tensor_type("torch.FloatTensor")
        torch.set_default_dtype(dtype)


def copy_tree(x: Any) -> Any:
    """Fresh copies of tensors, so a callee cannot touch the caller's inputs."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(copy_tree(v) for v in x)
    return x


@contextlib.contextmanager
def widened(model: torch.nn.Module, dtype: torch.dtype):
    """`model` in float64 for the duration, then in `dtype` again, with tensors held as
    plain attributes put back as they were (a stateful reference, e.g. an RNN's hidden
    state, would otherwise keep a float64 state and fail later calls)."""
    plain = [(m, k, v) for m in model.modules() for k, v in vars(m).items()
             if isinstance(v, torch.Tensor)]
    model.to(torch.float64)  # widening the rounded weights is exact, as is narrowing
    try:
        yield model
    finally:
        model.to(dtype)
        for m, k, v in plain:
            setattr(m, k, v)
