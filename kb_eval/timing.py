"""The one timing module: baseline and eval both time through `time_callable`.

CUDA: each call is bracketed by CUDA events after the L2 cache is flushed (a buffer twice
the device's L2 is zeroed), so every call starts cold, as the first call of a real model
step would. Work that a callable leaves on other streams is counted: after the end event
we synchronize the whole device and record a second event; when that one lands later than
the end event plus the usual synchronize latency, the call's time is taken up to it (minus
that latency, calibrated once per process). CPU: the same API with a monotonic clock.
Warmup calls first, then `trials` timed calls; the first timed call is discarded by
default (allocator growth and lazy initialisation land there).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import torch
from pydantic import BaseModel, Field

ArgsForTrial = Callable[[int], Sequence[Any]]


class TimingSettings(BaseModel):
    warmup: int = Field(5, ge=0, description="untimed calls before timing")
    trials: int = Field(100, ge=1, description="timed calls kept in the statistics")
    flush_l2: bool = Field(True, description="zero a 2x-L2 buffer before each call (CUDA)")
    discard_first: bool = Field(True, description="time one extra call and drop the first")
    method: str = Field("cuda_events+l2flush+devsync", description="recorded with results; "
                        "speedups refuse to mix methods")


class TimingStats(BaseModel):
    mean: float
    median: float
    std: float
    min: float
    max: float
    p25: float
    p75: float
    n: int
    unit: str = "ms"

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> "TimingStats":
        xs = sorted(samples_ms)
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        return cls(mean=statistics.fmean(xs), median=statistics.median(xs),
                   std=statistics.stdev(xs) if len(xs) > 1 else 0.0, min=xs[0], max=xs[-1],
                   p25=q[0], p75=q[2], n=len(xs))


def time_callable(fn: Callable[..., Any], settings: TimingSettings | None = None,
                  device: str | torch.device = "cpu",
                  args_for_trial: ArgsForTrial | None = None,
                  on_output: Callable[[int, Any], None] | None = None) -> TimingStats:
    """Time `fn(*args_for_trial(i))` (or `fn()`); `on_output(i, out)` sees each timed
    call's output after its timing was taken (eval uses it to re-check outputs)."""
    settings = settings or TimingSettings()
    device = torch.device(device)
    args = args_for_trial or (lambda i: ())
    for i in range(settings.warmup):
        fn(*args(-1 - i))
    n = settings.trials + (1 if settings.discard_first else 0)
    timer = _CudaTimer(device, settings.flush_l2) if device.type == "cuda" else _CpuTimer()
    samples = []
    for i in range(n):
        call_args = args(i)
        ms, out = timer.time_one(fn, call_args)
        samples.append(ms)
        if on_output is not None:
            on_output(i, out)
        del out
    if settings.discard_first:
        samples = samples[1:]
    return TimingStats.of(samples)


class _CpuTimer:
    def time_one(self, fn, call_args):
        t0 = time.perf_counter_ns()
        out = fn(*call_args)
        return (time.perf_counter_ns() - t0) / 1e6, out


class _CudaTimer:
    _sync_latency_ms: dict[int, float] = {}

    def __init__(self, device: torch.device, flush_l2: bool):
        self.device = device
        torch.cuda.set_device(device)
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush_buf = (torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device=device)
                          if flush_l2 else None)
        self.start, self.end, self.after_sync = (torch.cuda.Event(enable_timing=True)
                                                 for _ in range(3))
        self.latency = self._calibrate()

    def _calibrate(self) -> float:
        """Median gap between an end event and one recorded right after a device sync,
        when nothing else is running: the cost the side-stream check must not count."""
        idx = self.device.index or 0
        if idx not in self._sync_latency_ms:
            probe = torch.empty(1, device=self.device)
            gaps = []
            for _ in range(30):
                self.start.record()
                probe.zero_()
                self.end.record()
                torch.cuda.synchronize(self.device)
                self.after_sync.record()
                self.after_sync.synchronize()
                gaps.append(self.end.elapsed_time(self.after_sync))
            self._sync_latency_ms[idx] = statistics.median(gaps)
        return self._sync_latency_ms[idx]

    def time_one(self, fn, call_args):
        if self.flush_buf is not None:
            self.flush_buf.zero_()
        torch.cuda.synchronize(self.device)
        self.start.record()
        out = fn(*call_args)
        self.end.record()
        torch.cuda.synchronize(self.device)  # device-wide: every stream's work is done
        self.after_sync.record()
        self.after_sync.synchronize()
        on_stream = self.start.elapsed_time(self.end)
        to_idle = self.start.elapsed_time(self.after_sync) - self.latency
        # Work still running on another stream after the end event shows up as a late
        # device-idle point; plain jitter of the sync latency stays under 2x + 20 us.
        late = self.end.elapsed_time(self.after_sync) > 2 * self.latency + 0.02
        return (max(on_stream, to_idle) if late else on_stream), out
