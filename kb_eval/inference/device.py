"""DeviceInfo: the target device's specs, as shown to the model in prompts.

    info = detect_device_info("cuda")     # this machine's GPU 0 (or its CPU for "cpp")
    info = DeviceInfo(kind="gpu", name="NVIDIA H200", sm_count=132, ...)   # or by hand
    info = from_hardware(results_header.hardware)   # the GPU a results file was made on

Bandwidth comes from a table of data-sheet peaks; None fields show as "unknown".
"""

from __future__ import annotations

import os
import platform
from typing import Literal

from pydantic import BaseModel

from kb_eval.results import HardwareInfo

# Peak DRAM bandwidth in GB/s by a substring of torch's device name (first match wins).
KNOWN_BANDWIDTH_GBPS = [
    ("GH200", 4000), ("H200", 4800), ("H100 SXM", 3350), ("H100 NVL", 3900),
    ("H100 PCIe", 2000), ("H100", 3350),
    ("B200", 8000), ("A100-SXM4-80GB", 2039), ("A100 80GB PCIe", 1935),
    ("A100", 1555), ("L40S", 864), ("L40", 864), ("L4", 300), ("A10G", 600), ("A10", 600),
    ("RTX 4090", 1008), ("RTX 3090", 936), ("V100", 900), ("T4", 320),
]


class DeviceInfo(BaseModel):
    kind: Literal["gpu", "cpu"]
    name: str
    sm_count: int | None = None
    memory_gb: float | None = None
    mem_bandwidth_gbps: float | None = None
    l2_mb: float | None = None
    compute_capability: str | None = None   # e.g. "9.0"
    cores: int | None = None                # CPU: logical cores available to us
    isa: str | None = None                  # CPU: vector extensions, e.g. "avx2 avx512f"


def detect_device_info(backend: str) -> DeviceInfo:
    """The device a `backend` candidate runs on here: GPU 0 for cuda/triton, else the CPU."""
    if backend != "cpp":
        hardware = HardwareInfo.detect()
        if hardware.device == "cuda":
            return from_hardware(hardware)
    return _cpu_info()


def from_hardware(hardware: HardwareInfo) -> DeviceInfo:
    """DeviceInfo of a results file's HardwareInfo (GPU), plus the bandwidth table."""
    if hardware.device != "cuda":
        return _cpu_info()
    bandwidth = next((bw for key, bw in KNOWN_BANDWIDTH_GBPS if key in hardware.name), None)
    return DeviceInfo(kind="gpu", name=hardware.name, sm_count=hardware.num_sms,
                      memory_gb=_scaled(hardware.memory_bytes, 2**30),
                      mem_bandwidth_gbps=bandwidth, l2_mb=_scaled(hardware.l2_bytes, 2**20),
                      compute_capability=hardware.capability)


def _scaled(n_bytes: int | None, unit: int) -> float | None:
    return round(n_bytes / unit, 1) if n_bytes else None


def _cpu_info() -> DeviceInfo:
    name, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name in ("", platform.machine()):
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = value
    except OSError:
        pass
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile")
    isa = " ".join(f for f in wanted if f in flags.split()) or None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return DeviceInfo(kind="cpu", name=name or "unknown CPU", cores=cores, isa=isa)
