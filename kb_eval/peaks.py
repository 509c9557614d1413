"""The machine's peaks, measured once per machine and kept beside its baseline files
(results/baseline/<hardware-slug>/peaks.json): DRAM bandwidth and torch.matmul's dense
rate at fp32 (TF32 off), TF32, bf16 and fp16, the ceilings of every speed-of-light share.
`python -m kb_eval.baseline --peaks` measures them again; a file made on other hardware
is measured again on first need (`ensure_peaks`).
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from kb_eval.results import (SCHEMA_VERSION, HardwareInfo, Producer, now_iso, read_model,
                             write_json_atomic)
from kb_eval.errors import UserError

# (m, n, k) of the matmuls timed for the rate, the best kept: square, long-k and wide
GPU_MATMUL_SHAPES = ((2048,) * 3, (4096,) * 3, (8192,) * 3, (12288,) * 3,
                     (4096, 4096, 16384), (256, 256, 1 << 19), (2048, 4096, 8192))
CPU_MATMUL_SHAPES = ((1024,) * 3, (2048,) * 3)
# Bandwidth buffers: at least this (a GPU; a CPU: 64 MiB), and 4x the largest cache.
MIN_BUFFER = 4 << 30
REPEATS = 5  # timings per figure, the fastest kept
FLOAT_PEAKS = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}  # run precision -> rate


class PeaksFile(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "peaks"
    created: str = Field(default_factory=now_iso)
    produced_by: Producer
    hardware: HardwareInfo
    copy_bytes_per_s: float | None = None  # bytes read + written per second
    read_bytes_per_s: float | None = None
    matmul_flops_per_s: dict[str, float] = Field(default_factory=dict)  # fp32 tf32 bf16 fp16
    # Bytes a call may find in a cache rather than DRAM: the GPU's L2, the CPU's largest
    # cache level (all of its instances)
    cache_bytes: int | None = None
    buffer_bytes: int | None = None
    errors: dict[str, str] = Field(default_factory=dict)  # figure -> why not measured

    @property
    def bandwidth(self) -> float | None:
        """The memory ceiling: the faster of the copy and the read."""
        known = [x for x in (self.copy_bytes_per_s, self.read_bytes_per_s) if x]
        return max(known) if known else None

    def matmul_peak(self, precision: str) -> float | None:
        """The rate a run at `precision` is held to; a CPU with no native bf16 or fp16
        math computes them in fp32, so its fp32 rate."""
        rates = self.matmul_flops_per_s
        rate = rates.get(FLOAT_PEAKS.get(precision, precision))
        return rate if rate or self.hardware.device != "cpu" else rates.get("fp32")

    def fits(self, hardware: HardwareInfo) -> bool:
        """Measured on this machine (same device name; a CPU: same cores too)."""
        mine = self.hardware
        return (mine.device == hardware.device and mine.name == hardware.name
                and (hardware.device != "cpu" or mine.cpu_count == hardware.cpu_count))


def peaks_path(results_dir: Path, hw_slug: str) -> Path:
    return Path(results_dir) / "baseline" / hw_slug / "peaks.json"


def read_peaks(path: Path, hardware: HardwareInfo) -> PeaksFile | None:
    """The file at `path` if it was measured on this machine, else None."""
    if not Path(path).exists():
        return None
    try:
        peaks = read_model(path, PeaksFile)
    except (UserError, ValidationError):
        return None
    return peaks if peaks.fits(hardware) else None


def write_peaks(results_dir: Path, figures: dict, hardware: HardwareInfo) -> PeaksFile:
    peaks = PeaksFile(produced_by=Producer(tool="kb_eval.peaks"), hardware=hardware, **figures)
    write_json_atomic(peaks_path(results_dir, hardware.slug), peaks)
    return peaks


# ------------------------------------------------------------------ measuring
def measure(device: str = "cuda") -> dict:
    """The figures of `device` (cuda, cuda:N or cpu) as PeaksFile fields; one that fails
    is left out, with its error."""
    import torch

    dev = torch.device(device)
    cache = cache_bytes(dev)
    figures: dict = {"cache_bytes": cache, "matmul_flops_per_s": {}, "errors": {}}
    big = (min(MIN_BUFFER, torch.cuda.get_device_properties(dev).total_memory // 8)
           if dev.type == "cuda" else 64 << 20)
    n = max(big, 4 * (cache or 0))
    figures["buffer_bytes"] = n
    for name, fn in (("copy_bytes_per_s", _copy_rate), ("read_bytes_per_s", _read_rate)):
        try:
            figures[name] = fn(dev, n)
        except Exception as e:  # noqa: BLE001 - a figure missing, the others stand
            figures["errors"][name] = f"{type(e).__name__}: {e}"[:200]
    for name in (("fp32", "tf32", "bf16", "fp16") if dev.type == "cuda"
                 else ("fp32", "bf16", "fp16")):
        if dev.type == "cpu" and not cpu_native(name):
            figures["errors"][f"matmul_{name}"] = (f"no native {name} math on this CPU "
                                                   f"(its fp32 rate is the ceiling)")
            continue
        try:
            figures["matmul_flops_per_s"][name] = _matmul_rate(dev, name)
        except Exception as e:  # noqa: BLE001
            figures["errors"][f"matmul_{name}"] = f"{type(e).__name__}: {e}"[:200]
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return figures


def measure_task(payload: dict, workdir: Path) -> dict:
    """The measurement in an isolated child (kb_eval.isolation.run_isolated)."""
    return measure(payload.get("device", "cuda"))


def cache_bytes(dev) -> int | None:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).L2_cache_size
    return cpu_cache_bytes()


def cpu_cache_bytes() -> int | None:
    """The CPU's largest cache level, summed over its instances (one per shared set of
    cores), from sysfs; None where it does not say."""
    sizes: dict[int, dict[str, int]] = {}
    for d in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int((d / "level").read_text())
            size = _size((d / "size").read_text().strip())
            shared = (d / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        sizes.setdefault(level, {})[shared] = size
    return sum(sizes[max(sizes)].values()) if sizes else None


# CPU flags (/proc/cpuinfo: x86 "flags", ARM "Features") that say a format has native math
NATIVE_FLAGS = {"fp32": None, "bf16": {"avx512_bf16", "amx_bf16", "bf16"},
                "fp16": {"avx512_fp16", "amx_fp16", "fphp"}}


def cpu_native(name: str) -> bool:
    """Whether this CPU computes `name` natively (fp32 always); without it torch's rate is
    a small fraction of fp32's, a figure no kernel is held to."""
    want = NATIVE_FLAGS.get(name)
    if want is None:
        return True
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    flags = {f for line in text.splitlines()
             if line.split(":")[0].strip().lower() in ("flags", "features")
             for f in line.partition(":")[2].split()}
    return bool(flags & want)


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _fastest(dev, fn, repeats: int = REPEATS, inner: int = 1) -> float:
    """Seconds of one fn() call, the fastest of `repeats` timings of `inner` calls in a
    row (CUDA events on a GPU, the monotonic clock on a CPU), after one untimed call."""
    import torch

    fn()
    best = float("inf")
    for _ in range(repeats):
        if dev.type == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            seconds = time.perf_counter() - t0
        best = min(best, seconds / inner)
    return best


def _copy_rate(dev, n: int) -> float:
    """Bytes read + written per second by the faster of a copy and an elementwise kernel
    (a GPU's DMA memcpy streams slower than a vectorised kernel)."""
    import torch

    src = torch.ones(n // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    seconds = min(_fastest(dev, lambda: dst.copy_(src)),
                  _fastest(dev, lambda: torch.neg(src, out=dst)))
    return 2 * src.nbytes / seconds


def _read_rate(dev, n: int) -> float:
    import torch

    src = torch.ones(n // 4, dtype=torch.float32, device=dev)
    return src.nbytes / _fastest(dev, lambda: src.sum())


def _matmul_rate(dev, name: str) -> float:
    """FLOP/s of torch.matmul at `name` (tf32: fp32 with TF32 allowed), the best over a
    few shapes."""
    import torch

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16}[name]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    try:
        best = 0.0
        for m, n, k in (GPU_MATMUL_SHAPES if dev.type == "cuda" else CPU_MATMUL_SHAPES):
            a = torch.randn(m, k, device=dev).to(dtype)
            b = torch.randn(k, n, device=dev).to(dtype)
            inner = 10 if dev.type == "cuda" else 1
            seconds = _fastest(dev, lambda: torch.matmul(a, b), REPEATS, inner)
            best = max(best, 2 * m * n * k / seconds)
        return best
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
