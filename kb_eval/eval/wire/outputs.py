"""A checked call's outputs on disk: how the candidate child hands them to the reference.

    MAGIC | header length (8 bytes, little-endian) | JSON header | padding | raw bytes

The header lists each tensor's dtype and shape; the bytes follow, each tensor contiguous
and 64-byte aligned. No pickle, not even torch's weights-only one: reading runs nothing,
and the reader checks the header against a whitelist of dtypes, the file's exact size and
a cap before it reads a byte of data (a candidate wrote the file). It reads into memory it
owns (no mmap: a file cut short under it cannot crash the reader).

Why not torch.save: on the H200 saving one 64 MB output that way took 79 ms (a pageable
copy, a clone, a zip with its CRC), and a sample saves up to 14 outputs; a pinned copy plus
one write, as here, took 22 ms.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

MAGIC = b"KBOUT1\n"
ALIGN = 64
MAX_HEADER = 1 << 20
MAX_TENSORS = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
    torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}


class OutputsUnreadable(Exception):
    pass


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Staging:
    """A reusable pinned host buffer: copies between a GPU and pinned memory run at full
    speed (1.2 ms per 64 MB device-to-host on the H200, 36 ms from pageable memory).
    What it hands out is valid until its next use."""

    def __init__(self):
        self.buffer: torch.Tensor | None = None

    def bytes(self, n: int) -> torch.Tensor:
        if self.buffer is None or self.buffer.numel() < n:
            self.buffer = None  # free the old one first
            self.buffer = torch.empty(max(n, 1 << 20), dtype=torch.uint8, pin_memory=True)
        return self.buffer[:n]


WRITE_CHUNK = 256 << 20  # bytes per device-to-host step: pinned memory stays this small


def _write_tensor(f, t: torch.Tensor, staging: Staging) -> None:
    """A tensor's bytes in chunks through the pinned buffer, so writing a multi-GiB output
    costs the writer 256 MiB of host memory, not the output's size (its memory limit
    would otherwise count a harness copy as the candidate's use)."""
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.device.type == "cpu":
        f.write(memoryview(flat.numpy()))
        return
    for s in range(0, flat.numel(), WRITE_CHUNK):
        part = flat[s:s + WRITE_CHUNK]
        host = staging.bytes(part.numel())
        host.copy_(part)
        f.write(memoryview(host.numpy()))


def write(path: Path, tensors: list[torch.Tensor], staging: Staging | None = None) -> None:
    staging = staging or Staging()
    header = json.dumps([{"dtype": str(t.dtype).removeprefix("torch."),
                          "shape": list(t.shape)} for t in tensors]).encode()
    start = _aligned(len(MAGIC) + 8 + len(header))
    with open(path, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header)
        f.write(b"\0" * (start - f.tell()))
        for t in tensors:
            _write_tensor(f, t, staging)
            nbytes = t.numel() * t.element_size()
            f.write(b"\0" * (_aligned(nbytes) - nbytes))


def _layout(header: object) -> list[tuple[torch.dtype, list[int], int]]:
    """(dtype, shape, bytes) per tensor, or OutputsUnreadable."""
    if type(header) is not list or len(header) > MAX_TENSORS:
        raise OutputsUnreadable("its header is not a list of at most 64 tensors")
    out = []
    for entry in header:
        dtype = DTYPES.get(entry.get("dtype")) if type(entry) is dict else None
        shape = entry.get("shape") if type(entry) is dict else None
        if dtype is None or type(shape) is not list or len(shape) > 16 or not all(
                type(n) is int and 0 <= n < 1 << 40 for n in shape):
            raise OutputsUnreadable(f"its header has a bad entry: {str(entry)[:100]}")
        numel = 1
        for n in shape:
            numel *= n
        out.append((dtype, shape, numel * dtype.itemsize))
    return out


def read(path: Path, max_bytes: int, staging: Staging | None = None) -> list[torch.Tensor]:
    """The tensors of one file (CPU), or OutputsUnreadable saying what is wrong with it.
    `max_bytes` caps the file (a child must not make us read any size). With `staging`
    they are read into its pinned buffer (valid until its next use), for a fast copy to
    a GPU."""
    name = path.name
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OutputsUnreadable(f"{name} is not a plain file")
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise OutputsUnreadable(f"{name} is {size} bytes, far more than the "
                                        f"reference's outputs")
            head = f.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
                raise OutputsUnreadable(f"{name} is not an outputs file")
            n = int.from_bytes(head[len(MAGIC):], "little")
            if n > MAX_HEADER:
                raise OutputsUnreadable(f"{name} has a header of {n} bytes")
            try:
                layout = _layout(json.loads(f.read(n)))
            except ValueError:
                raise OutputsUnreadable(f"{name} has a header that is not JSON") from None
            start = _aligned(len(MAGIC) + 8 + n)
            expected = start + sum(_aligned(b) for _, _, b in layout)
            if size != expected:
                raise OutputsUnreadable(f"{name} is {size} bytes, its header says {expected}")
            f.seek(start)
            data = (staging.bytes(expected - start) if staging is not None
                    else torch.empty(expected - start, dtype=torch.uint8))
            _read_into(f, data, name)
            tensors, at = [], 0
            for dtype, shape, nbytes in layout:
                tensors.append(data[at:at + nbytes].view(dtype).reshape(shape))
                at += _aligned(nbytes)
            return tensors
    except FileNotFoundError:
        raise OutputsUnreadable(f"{name} was not written") from None
    except OSError as e:
        raise OutputsUnreadable(f"{name} is unreadable: {e.strerror}") from None


def _read_into(f, data: torch.Tensor, name: str) -> None:
    view, got = memoryview(data.numpy()), 0
    while got < len(view):  # one read returns at most ~2 GiB on Linux
        n = f.readinto(view[got:])
        if not n:
            raise OutputsUnreadable(f"{name} was cut short")
        got += n
