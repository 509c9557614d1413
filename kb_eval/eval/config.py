"""EvalConfig: every knob of an evaluation (the CLI and the run stage both fill one)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kb_eval.timing import TimingSettings


# Build children per core (see default_jobs); the Ray executor gives each build task
# 1 / BUILDS_PER_CORE of a CPU so that a node runs as many at once as a local run does.
BUILDS_PER_CORE = 1.25


def default_jobs() -> int:
    """Build children: a quarter more than the cores, to fill the serial gaps of a build
    (torch import, ninja, link) that leave a core idle."""
    return int((os.cpu_count() or 1) * BUILDS_PER_CORE)


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "cuda", "triton", "cpp"] = "auto"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    timing: TimingSettings = Field(default_factory=TimingSettings)
    correct_trials: int = Field(5, ge=1, description="correctness trials, fresh inputs each")
    recheck_timed: int = Field(8, ge=0, description="timed calls whose outputs are also "
                               "checked (picked at random after each call)")
    atol: float | None = Field(None, ge=0, description="default: per precision")
    rtol: float | None = Field(None, ge=0, description="default: per precision")
    tolerance: Literal["f64", "kernelbench"] = Field(
        "f64", description="which rule decides correctness: f64 (error against the reference "
        "run in float64 within K times the reference's own, kb_eval/eval/judge/truth.py) or "
        "kernelbench (allclose at atol/rtol); records carry both verdicts")
    live_baseline: bool = Field(False, description="time the reference in this run instead "
                                "of reading results/baseline/<hw>/<source>/<precision>.json")
    baseline_mode: str = Field("eager", pattern=r"^(eager|compile-[a-z-]+|tvm(-noarch)?)$",
                               description="which baseline file: eager, compile-<mode> "
                               "(`python -m kb_eval.baseline --compile <mode>`) or tvm[-noarch] "
                               "(`--compile tvm` or `tvm-noarch`)")
    results_dir: Path = Path("results")
    cache_dir: Path = Path(".cache/kb_eval")
    jobs: int = Field(default_factory=lambda: default_jobs(), ge=1,
                      description="parallel build children")
    max_jobs_per_build: int = Field(2, ge=1, description="compiler processes per build (MAX_JOBS)")
    devices: list[str] | None = Field(None, description="GPU ids to evaluate on "
                                      "(default: every visible GPU)")
    pch: bool = Field(True, description="precompile torch/extension.h once per compiler "
                      "flags for C++ builds (GCC; see kb_eval/eval/schedule/pch.py)")
    slim_cuda_header: bool = Field(True, description="compile CUDA files against smaller "
                                   "torch/extension.h headers first (lean, then slim), "
                                   "the real one if those fail "
                                   "(see kb_eval/eval/schedule/nvcc_front.py)")
    build_timeout_s: float = Field(600, gt=0)
    run_timeout_s: float = Field(300, gt=0)
    # The API's default stays 1 (it does not know the device kind); the commands default to
    # 3 on a GPU, 1 on a CPU (kb_eval/cli.py lane_depth).
    lane_depth: int = Field(1, ge=1, le=16, description="candidate children in flight per "
                            "device (their timing steps still run one at a time)")
    cpu_lanes: int = Field(1, ge=1, le=8, description="cpp backend: device lanes on the "
                           "CPU (stand-ins for GPUs, to exercise multi-device scheduling)")
    load_budget_s: float = Field(90, gt=0, description="seconds for a candidate's import, "
                                 "init and first call (lazy compiles happen there)")
    call_budget_s: float = Field(30, gt=0, description="seconds per later call (the timing "
                                 "step: per call it makes)")
    mem_limit_mb: int | None = Field(16000, ge=256)
    extra_env: dict[str, str] = Field(default_factory=dict, description="added to every "
                                      "child's environment (e.g. PATH)")
    count_launches: bool | None = Field(
        None, description="record each correct sample's kernel launches per forward (one "
        "profiled call on each side, after timing). None: on the CPU only (on a GPU the "
        "profiler's start costs seconds per candidate process)")
    sandbox: bool = Field(True, description="build and run candidates in the sandbox "
                          "(kb_eval/isolation/sandbox.py); off only where namespaces are missing")
    keep_workdirs: bool = Field(False, description="keep each sample's scratch folder")
    executor: Literal["local", "ray"] = Field("local", description="who runs builds and "
                                              "device lanes: this machine, or a Ray cluster")
    ray_address: str | None = Field(None, description="the Ray cluster to join (None: "
                                    "$RAY_ADDRESS, else a new one on this machine)")

    @field_validator("results_dir", "cache_dir")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        """Children work in other folders: every path handed to them must be absolute."""
        return Path(v).expanduser().resolve()

    def counts_launches(self, device_kind: str) -> bool:
        return self.count_launches if self.count_launches is not None else device_kind == "cpu"

    def device_kind(self, cuda_available: bool) -> str:
        """cpp candidates run on the CPU; cuda and triton need a GPU."""
        return "cpu" if self.resolved_backend(cuda_available) == "cpp" else "cuda"

    def resolved_backend(self, cuda_available: bool) -> str:
        if self.backend == "auto":
            return "cuda" if cuda_available else "cpp"
        return self.backend
