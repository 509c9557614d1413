"""What the GPU was doing around a timing: clocks, temperatures, power and why it held its
clocks back (NVML), so that clock drift between timings can be told from a timing fault.
"""

from __future__ import annotations

import torch

# NVML's "clocks event reasons" that mean the GPU ran slower than it could (idle and the
# application clock setting are not slowdowns of a running kernel).
SLOWDOWNS = {
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
}


def snapshot(device: torch.device) -> dict | None:
    """SM and memory clocks (MHz), GPU and memory temperatures (C), power (W) and the
    active slowdowns of `device`; None on a CPU or when NVML cannot be read."""
    if device.type != "cuda":
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(_uuid(device))
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        hbm = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])[0]
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "mem_temp_c": hbm.value.uiVal if hbm.nvmlReturn == pynvml.NVML_SUCCESS else None,
            "power_w": round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
            "slowdowns": [name for name, bit in SLOWDOWNS.items()
                          if reasons & getattr(pynvml, bit)],
        }
    except Exception:  # noqa: BLE001 - no NVML library, an old driver, a MIG slice
        return None


def _uuid(device: torch.device) -> str:
    """NVML numbers GPUs physically, torch after CUDA_VISIBLE_DEVICES: match by UUID."""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
