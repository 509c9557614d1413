"""Outputs handed over on the GPU (CUDA IPC) instead of files: buffers the reference
server allocates for one sample and the candidate's child copies its outputs into. A
multi-GB output through a file costs seconds per checked call (docs/PERFORMANCE.md).

- The server allocates each buffer with `cuMemAlloc` (a handle maps a whole allocation,
  so the child reaches these bytes and nothing else) and exports handles; it never opens
  one, so nothing a child hands over is mapped into the trusted process.
- The child opens the handles and copies each checked call's outputs into a buffer; the
  label's `.out` file holds only a header (outputs.py checks it); what does not fit goes
  to a file. The server frees the buffers once the child has ended.
The child can write its buffers while it lives, as it could rewrite its files
(docs/GUARANTEES.md, "a forged report"). Driver API through ctypes: torch's IPC keeps
memory reserved for a killed consumer.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from kb_eval.eval.wire import outputs
from kb_eval.faults import inject_fault

SLOT_ALIGN = 2 << 20  # buffers in whole 2 MiB pages: an IPC mapping never shares one
MAX_SLOTS = 64


CUDA_ERROR_OUT_OF_MEMORY = 2  # cuMemAlloc's answer when the device has no room


class CudaError(RuntimeError):
    pass


class _Handle(ctypes.Structure):
    # CUipcMemHandle: 64 opaque bytes (c_ubyte: a c_char array would stop at a zero byte)
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


_DRIVER = None


def _driver() -> ctypes.CDLL:
    global _DRIVER
    if _DRIVER is None:
        lib = ctypes.CDLL("libcuda.so.1")
        ptr, u64, size = ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64, ctypes.c_size_t
        for name, args in (("cuMemAlloc_v2", [ptr, size]), ("cuMemFree_v2", [u64]),
                           ("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), u64]),
                           ("cuIpcOpenMemHandle_v2", [ptr, _Handle, ctypes.c_uint]),
                           ("cuGetErrorString", [ctypes.c_int,
                                                 ctypes.POINTER(ctypes.c_char_p)])):
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        _DRIVER = lib
    return _DRIVER


def _check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(result, ctypes.byref(text))
        raise CudaError(f"{what}: CUDA error {result} "
                        f"({(text.value or b'?').decode(errors='replace')})")


def _current(device: torch.device) -> None:
    """torch's context of `device` current on this thread (the driver calls use it)."""
    torch.cuda.set_device(device)
    torch.empty(1, device=device)


def as_tensor(ptr: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor over device memory we own by pointer (no copy, not torch's)."""
    class Raw:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                    "data": (ptr, False), "version": 2}
    return torch.as_tensor(Raw(), device=device)


def slot_size(out_bytes: int) -> int:
    """A buffer for one call's outputs of `out_bytes`: room for every tensor's alignment
    padding (outputs.ALIGN, at most outputs.MAX_TENSORS tensors), in whole pages."""
    padded = out_bytes + outputs.ALIGN * outputs.MAX_TENSORS
    return -(-padded // SLOT_ALIGN) * SLOT_ALIGN


class Exported:
    """The server's side: `n` buffers of `nbytes` on `device`, their handles (hex, for the
    child's payload), and byte views of them for the comparison. `free` once the child
    has ended."""

    def __init__(self, n: int, nbytes: int, device: torch.device, at_least: int | None = None):
        """`n` buffers, or (`at_least`) as many as the device has room for but no fewer; the
        rest of the checked calls get files. No kernel: an export runs beside a neighbour's
        timed calls, and the child fills the buffers (Slots.open)."""
        if not 0 < n <= MAX_SLOTS:
            raise ValueError(f"{n} buffers asked, at most {MAX_SLOTS}")
        _current(device)
        self.device, self.nbytes, self.ptrs = device, nbytes, []
        self.handles: list[str] = []
        try:
            for _ in range(n):
                ptr = ctypes.c_uint64()
                status = _driver().cuMemAlloc_v2(ctypes.byref(ptr), nbytes)
                if status == CUDA_ERROR_OUT_OF_MEMORY and at_least and len(self.ptrs) >= at_least:
                    break  # the rest go through files
                _check(status, f"allocating {nbytes} bytes")
                self.ptrs.append(ptr.value)
                handle = _Handle()
                _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), ptr.value),
                       "exporting a buffer")
                self.handles.append(bytes(handle).hex())
        except BaseException:
            self.free()
            raise

    def views(self) -> list[torch.Tensor]:
        return [as_tensor(p, self.nbytes, self.device) for p in self.ptrs]

    def free(self) -> None:
        _current(self.device)
        torch.cuda.synchronize(self.device)  # no comparison still reads them
        for ptr in self.ptrs:
            _driver().cuMemFree_v2(ptr)
        self.ptrs = []


# The child's status when the buffers handed over could not be opened and filled: it
# ends before candidate code, and the sample is evaluated again through files.
UNOPENED = "exchange_unopened"


class Slots:
    """The child's side: the server's buffers, opened at the first use; `put` copies one
    call's outputs into the next free one and writes the label's header file. Buffers
    that cannot be opened mean files, as without them."""

    def __init__(self, spec: dict | None, device: torch.device):
        self.spec, self.device = spec or {}, device
        self.buffers: list[torch.Tensor] | None = None
        self.used = 0
        # The bytes the last `put` copied, one flat uint8 view per output: what the server
        # will judge, compared with the outputs later to see a write after the save.
        self.last_bytes: list[torch.Tensor] = []

    def open(self) -> str | None:
        """Open the buffers and fill them with all-ones bytes (NaN in every float type) before
        candidate code runs, so a header with no copy behind it judges as wrong rather than
        reading what an earlier sample left. Returns why buffers handed over could not be opened
        (None: they were, or none came); then no candidate code may run in this child."""
        if not self.spec.get("handles"):
            return None
        try:
            inject_fault("exchange_open")
            for view in self._open():
                view.fill_(0xFF)
            torch.cuda.synchronize(self.device)
        except Exception as e:  # noqa: BLE001 - ours, never the candidate's
            self.spec, self.buffers = {}, None
            return f"{type(e).__name__}: {e}"[:300]
        return None

    def _open(self) -> list[torch.Tensor]:
        if self.buffers is None:
            _current(self.device)
            self.buffers = []
            for hexed in self.spec["handles"][:MAX_SLOTS]:
                handle = _Handle.from_buffer_copy(bytes.fromhex(hexed))
                ptr = ctypes.c_uint64()
                _check(_driver().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1),
                       "opening the server's buffer")  # 1: lazy peer access
                self.buffers.append(as_tensor(ptr.value, int(self.spec["bytes"]),
                                              self.device))
        return self.buffers

    def fits(self, tensors: list[torch.Tensor]) -> bool:
        """Whether `put` would take these outputs (opened buffers, one left, room, on the
        GPU)."""
        if self.buffers is None or self.used >= len(self.buffers):
            return False
        return all(t.device.type == "cuda" for t in tensors) and \
            outputs.padded_bytes(tensors) <= int(self.spec["bytes"])

    def put(self, path: Path, tensors: list[torch.Tensor]) -> bool:
        """Outputs into the next buffer, the header to `path`; False (nothing written)
        when there is no buffer left or they do not fit (the caller writes a file)."""
        if not self.fits(tensors):  # never opened (and filled), full or too small: files
            return False
        slot = self.buffers[self.used]
        at, self.last_bytes = 0, []
        for t in tensors:
            flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
            slot[at:at + flat.numel()].copy_(flat)
            self.last_bytes.append(slot[at:at + flat.numel()])
            at += outputs.aligned(flat.numel())
        torch.cuda.synchronize(self.device)  # in the buffer before the header says so
        outputs.write_header(path, tensors, self.used)
        self.used += 1
        return True
