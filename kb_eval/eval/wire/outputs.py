"""A checked call's outputs on disk: how the candidate child hands them to the reference.

    MAGIC | header length (8 bytes, little-endian) | JSON header | padding | raw bytes

The header lists each tensor's dtype and shape; each tensor's bytes follow, contiguous
and 64-byte aligned. No pickle: reading runs nothing, and the reader checks the header
(dtype whitelist, the file's exact size, a cap) before reading a byte of data, into
memory it owns (no mmap). Faster than torch.save (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

MAGIC = b"KBOUT1\n"
DEVICE_MAGIC = b"KBDEV1\n"  # a header only: the bytes are in the server's buffer (device.py)
ALIGN = 64
MAX_HEADER = 1 << 20
MAX_TENSORS = 64
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
    torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}


class OutputsUnreadable(Exception):
    pass


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Staging:
    """A reusable pinned host buffer: copies between a GPU and pinned memory run at full
    speed (some 30x faster than from pageable memory: docs/PERFORMANCE.md).
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


def _entries(tensors: list[torch.Tensor]) -> list[dict]:
    return [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
            for t in tensors]


def padded_bytes(tensors: list[torch.Tensor]) -> int:
    """The bytes `tensors` take laid out one after another, each 64-byte aligned."""
    return sum(aligned(t.numel() * t.element_size()) for t in tensors)


def write_header(path: Path, tensors: list[torch.Tensor], slot: int) -> None:
    """The header of outputs whose bytes were copied into the server's buffer `slot`
    (device.py), laid out as in a file."""
    header = json.dumps({"slot": slot, "tensors": _entries(tensors)}).encode()
    path.write_bytes(DEVICE_MAGIC + len(header).to_bytes(8, "little") + header)


def write(path: Path, tensors: list[torch.Tensor], staging: Staging | None = None) -> None:
    staging = staging or Staging()
    header = json.dumps(_entries(tensors)).encode()
    start = aligned(len(MAGIC) + 8 + len(header))
    with open(path, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header)
        f.write(b"\0" * (start - f.tell()))
        for t in tensors:
            _write_tensor(f, t, staging)
            nbytes = t.numel() * t.element_size()
            f.write(b"\0" * (aligned(nbytes) - nbytes))


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


def read(path: Path, max_bytes: int, staging: Staging | None = None,
         slots: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The tensors of one file (CPU), or OutputsUnreadable saying what is wrong with it.
    `max_bytes` caps the file; `staging`: read into its pinned buffer (valid until its next
    use). A header-only file (write_header) gives views into `slots`' buffer (device.py),
    checked against its size."""
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
            magic = head[:len(MAGIC)]
            if len(head) < len(MAGIC) + 8 or magic not in (MAGIC, DEVICE_MAGIC):
                raise OutputsUnreadable(f"{name} is not an outputs file")
            n = int.from_bytes(head[len(MAGIC):], "little")
            if n > MAX_HEADER:
                raise OutputsUnreadable(f"{name} has a header of {n} bytes")
            try:
                header = json.loads(f.read(n))
            except ValueError:
                raise OutputsUnreadable(f"{name} has a header that is not JSON") from None
            if magic == DEVICE_MAGIC:
                return _in_slot(name, header, slots or [])
            layout = _layout(header)
            start = aligned(len(MAGIC) + 8 + n)
            expected = start + sum(aligned(b) for _, _, b in layout)
            if size != expected:
                raise OutputsUnreadable(f"{name} is {size} bytes, its header says {expected}")
            f.seek(start)
            data = (staging.bytes(expected - start) if staging is not None
                    else torch.empty(expected - start, dtype=torch.uint8))
            _read_into(f, data, name)
            return _views(data, layout)
    except FileNotFoundError:
        raise OutputsUnreadable(f"{name} was not written") from None
    except OSError as e:
        raise OutputsUnreadable(f"{name} is unreadable: {e.strerror}") from None


def _in_slot(name: str, header: object, slots: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors a header-only file places in one of the sample's buffers."""
    slot = header.get("slot") if type(header) is dict else None
    if type(slot) is not int or not 0 <= slot < len(slots):
        raise OutputsUnreadable(f"{name} names no buffer of this sample: {str(slot)[:40]}")
    layout = _layout(header.get("tensors"))
    need = sum(aligned(b) for _, _, b in layout)
    if need > slots[slot].numel():
        raise OutputsUnreadable(f"{name} places {need} bytes in a buffer of "
                                f"{slots[slot].numel()}")
    return _views(slots[slot], layout)


def _views(data: torch.Tensor, layout: list) -> list[torch.Tensor]:
    tensors, at = [], 0
    for dtype, shape, nbytes in layout:
        tensors.append(data[at:at + nbytes].view(dtype).reshape(shape))
        at += aligned(nbytes)
    return tensors


# Large files are read in pieces by several threads (os.preadv lets go of the GIL): about
# twice as fast with two (docs/PERFORMANCE.md).
READ_PIECE = 64 << 20
READ_THREADS = min(8, os.cpu_count() or 1)


def _read_into(f, data: torch.Tensor, name: str) -> None:
    """Fill `data` from the file's current offset on, or OutputsUnreadable when the file
    ends first (it was cut short after its size was checked)."""
    view, start = memoryview(data.numpy()), f.tell()
    pieces = range(0, len(view), READ_PIECE)
    if len(pieces) < 2 or READ_THREADS < 2:
        _read_piece(f.fileno(), view, start, name)
        return
    with ThreadPoolExecutor(min(READ_THREADS, len(pieces))) as pool:
        list(pool.map(lambda at: _read_piece(f.fileno(), view[at:at + READ_PIECE],
                                             start + at, name), pieces))


def _read_piece(fd: int, view: memoryview, offset: int, name: str) -> None:
    got = 0
    while got < len(view):  # one read returns at most ~2 GiB on Linux
        n = os.preadv(fd, [view[got:]], offset + got)
        if not n:
            raise OutputsUnreadable(f"{name} was cut short")
        got += n
