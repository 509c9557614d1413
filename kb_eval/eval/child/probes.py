"""Child-side checks of one call, shared by the candidate and the reference workers: OS
seeds drawn at the call, inputs regenerated from their seed, outputs `settled` after a wait,
tensor fingerprints instead of copies, the smaller-batch shape probe, the empty call.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import torch

from kb_eval import clocks
from kb_eval.eval.child.observe import _same
from kb_eval.inputs import make_inputs
from kb_eval.timing import TimingSettings, time_callable

SETTLE_S = 0.01  # how long an output must stay unchanged after its call returned
SETTLE_MAX_S = 0.5
RECHECK_BUDGET_BYTES = 4 << 30  # outputs of re-checked timed calls kept, per sample
SNAPSHOT_MAX_BYTES = 256 << 20  # larger outputs are fingerprinted, not cloned, to settle


def recheck_count(asked: int, n_calls: int, out_bytes: int | None) -> int:
    """Timed calls re-checked: as asked, within the calls made and RECHECK_BUDGET_BYTES."""
    fit = RECHECK_BUDGET_BYTES // max(int(out_bytes or 0), 1)
    return max(0, min(asked, n_calls, max(1, fit)))


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


def regenerate(module, seed: int, device: torch.device, dtype: torch.dtype) -> list:
    return make_inputs(module.get_inputs, seed, device, dtype)


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal on the same device (NaN equals NaN)."""
    return a.device == b.device and _same(a, b)


def same_outputs(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(same_tensor(x, y) for x, y in zip(a, b))


def changed_inputs(inputs: list, pristine: list) -> list[int]:
    """Indices of tensor inputs that differ from their pristine values."""
    return [i for i, (x, p) in enumerate(zip(inputs, pristine))
            if isinstance(x, torch.Tensor) and isinstance(p, torch.Tensor)
            and not same_tensor(x, p)]


def into_buffers(buffers: list | None, inputs: list) -> list:
    """`inputs`' values copied into `buffers` (the previous call's) when all fit, else
    `inputs`: new values at the same addresses defeat answers cached by pointer."""
    if buffers is None or len(buffers) != len(inputs) or not all(
            _fits(b, x) for b, x in zip(buffers, inputs)):
        return inputs
    for b, x in zip(buffers, inputs):
        if isinstance(x, torch.Tensor):
            b.copy_(x)
    return buffers


def _fits(b: Any, x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return (type(b) is torch.Tensor and b.shape == x.shape and b.dtype == x.dtype
                and b.device == x.device and b.stride() == x.stride())
    try:  # plain values (ints, floats, strings) must be equal; nested tensors never fit
        return type(b) is type(x) and not isinstance(x, (list, tuple, dict)) and bool(b == x)
    except Exception:  # noqa: BLE001 - a value that cannot say it is equal does not fit
        return False


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# a save returns the bytes it copied into the server's buffer (wire/device.Slots), or None
Save = Callable[[list[torch.Tensor]], "list[torch.Tensor] | None"]


def settled(tensors: list[torch.Tensor], device: torch.device, call_s: float,
            save: Save, on_device: Callable[[list], bool] = lambda ts: False) -> bool:
    """Save the outputs, wait, synchronize: False when something still wrote to them.
    Large outputs are compared with the saved device copy or fingerprinted, not cloned."""
    wait = min(SETTLE_MAX_S, SETTLE_S + 2 * call_s)
    if tensor_bytes(tensors) <= SNAPSHOT_MAX_BYTES:
        snapshot = [t.detach().clone() for t in tensors]
        clocks.sleep(wait)
        sync(device)
        save(snapshot)
        return all(same_tensor(t.detach(), s) for t, s in zip(tensors, snapshot))
    look = first_look(tensors, on_device(tensors))
    look = look_after_save(tensors, look, save(tensors))
    clocks.sleep(wait)
    sync(device)
    return unchanged(tensors, look)


def first_look(tensors: list[torch.Tensor], on_device: bool) -> list | None:
    """Before a save: None when it copies into the server's buffer, else the bytes (up to
    SNAPSHOT_MAX_BYTES) or fingerprints."""
    if on_device:
        return None
    if tensor_bytes(tensors) <= SNAPSHOT_MAX_BYTES:
        return [_bytes_of(t).clone() for t in tensors]
    return fingerprints(tensors)


def look_after_save(tensors: list[torch.Tensor], look: list | None,
                    saved: list[torch.Tensor] | None) -> list:
    """`look`, or the bytes the save copied (a file after all: fingerprints)."""
    if look is not None:
        return look
    return saved if saved is not None else fingerprints(tensors)


def unchanged(tensors: list[torch.Tensor], look: list) -> bool:
    """Whether the outputs are, bit for bit, what `look` saw."""
    if look and not isinstance(look[0], torch.Tensor):  # fingerprints
        return fingerprints(tensors) == look
    return same_bytes(tensors, look)


def same_bytes(tensors: list[torch.Tensor], saved: list[torch.Tensor]) -> bool:
    """Whether the outputs still hold, bit for bit, the bytes a save copied of them."""
    return len(tensors) == len(saved) and all(
        bool(torch.equal(_bytes_of(t), b)) for t, b in zip(tensors, saved))


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, flat, as a save lays them out (wire/device.Slots.put)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


# Integer views of each element size, for fingerprints and bitwise comparison.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_FP_CHUNK = 1 << 24  # elements per fingerprint step: 2 x 64 MB of temporaries at most
_FP_WEIGHTS: dict[torch.device, torch.Tensor] = {}


def _weights(device: torch.device) -> torch.Tensor:
    """Odd random 32-bit multipliers per position: moved elements change the fingerprint,
    and (odd: a bijection mod 2^32) so does any one changed word."""
    if device not in _FP_WEIGHTS:
        _FP_WEIGHTS[device] = host_weights().to(device)
    return _FP_WEIGHTS[device]


@functools.cache
def host_weights() -> torch.Tensor:
    """The multipliers in host memory, drawn once per process by their own generator."""
    g = torch.Generator().manual_seed(fresh_seed())
    odd = torch.randint(0, 2 ** 31, (_FP_CHUNK,), generator=g, dtype=torch.int64) * 2 + 1
    return odd.to(torch.int32)  # wraps mod 2^32: still odd


def _words(t: torch.Tensor) -> torch.Tensor:
    """`t`'s bits as flat integers: 32-bit words when its bytes allow."""
    flat = torch.view_as_real(t).reshape(-1) if t.is_complex() else t.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    size = flat.element_size()
    if flat.numel() * size % 4 == 0 and flat.storage_offset() * size % 4 == 0:
        return flat.view(_BITS[size]).view(torch.int32) if size != 4 else flat.view(torch.int32)
    return flat.view(_BITS[size]) if flat.is_floating_point() else flat


def fingerprint(t: torch.Tensor) -> tuple:
    """A tensor's dtype, shape and two 64-bit sums over its bits (plain and weighted by
    position), on its own device: a check without a copy."""
    t = t.detach()
    words = _words(t)
    w = _weights(words.device)
    plain = torch.zeros((), dtype=torch.int64, device=words.device)
    weighted = torch.zeros((), dtype=torch.int64, device=words.device)
    for k, s in enumerate(range(0, words.numel(), _FP_CHUNK)):
        c = words[s:s + _FP_CHUNK]
        plain += c.sum(dtype=torch.int64)
        # products wrap mod 2^32 (int32) and are summed in int64; the chunk's odd factor
        # tells chunks apart (the weights repeat)
        weighted += (c.to(torch.int32) * w[:c.numel()]).sum(dtype=torch.int64) * (2 * k + 1)
    plain_v, weighted_v = torch.stack([plain, weighted]).tolist()
    return str(t.dtype), tuple(t.shape), plain_v, weighted_v


def fingerprints(xs: list) -> list:
    """Fingerprints of the tensors in a list of inputs or outputs (other values as is)."""
    return [fingerprint(x) if isinstance(x, torch.Tensor) else repr(x) for x in xs]


def changed_since(xs: list, prints: list) -> list[int]:
    """Indices of tensors whose fingerprint is no longer the one recorded."""
    return [i for i, (x, p) in enumerate(zip(xs, prints))
            if isinstance(x, torch.Tensor) and fingerprint(x) != p]


# at most this much batched input for the probe: a check that only warns must be cheap
PROBE_MAX_BYTES = 1 << 30


def probe_batch(batch: int, batched_bytes: int) -> int:
    """One smaller than the problem's batch, or as many rows as fit in PROBE_MAX_BYTES."""
    if batched_bytes <= PROBE_MAX_BYTES:
        return batch - 1
    fit = batch * PROBE_MAX_BYTES // batched_bytes
    return max(min(2, batch - 1), min(batch - 1, fit))


def probe_inputs(inputs: list) -> list | None:
    """Inputs with a smaller batch (probe_batch), or None when there is no batch."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 2]
    if not tensors or tensors[0].shape[0] < 2:
        return None
    batch = tensors[0].shape[0]
    batched = [x for x in tensors if x.shape[0] == batch]
    keep = probe_batch(batch, tensor_bytes(batched))
    return [x[:keep] if isinstance(x, torch.Tensor) and x.dim() >= 2 and
            x.shape[0] == batch else x for x in inputs]


def thread_names() -> set[str]:
    return {f"{t.name}#{t.ident}" for t in threading.enumerate()}


def tensor_bytes(xs: Any) -> int:
    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size()
    if isinstance(xs, (list, tuple)):
        return sum(tensor_bytes(x) for x in xs)
    return 0


def empty_call_ms(device: torch.device, settings: TimingSettings, args: list) -> float:
    """The fastest of 30 empty calls through the same timer (the min: a preempted host
    inflates the median)."""
    probe = settings.model_copy(update={"warmup": 3, "trials": 30})
    return time_callable(lambda *a: None, probe, device, lambda i: args).min


def copy_bandwidth(device: torch.device) -> float | None:
    """Bytes/s of a device-to-device copy (read + write), for GPUs we have no figure for."""
    if device.type != "cuda":
        return None
    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * n / best
