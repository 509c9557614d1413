"""EvalContext: what one evaluation invocation fixes before any sample runs.

- the secret seed (`secrets.randbits`), kept in this process only: children get seeds
  derived from it per problem, never the secret, and it is never written to disk;
- the hardware, the device kind (cpp -> CPU, cuda/triton -> GPU) and the GPUs to use;
- the toolchain fingerprint that keys the build cache, and the children's environments;
- the baseline: the file for this hardware + precision + timing method, or live.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.eval.schedule import pch
from kb_eval.eval.schedule.build import is_gcc, toolchain_fingerprint
from kb_eval.eval.config import EvalConfig
from kb_eval.inputs import derive_seed
from kb_eval.isolation import NICE_VAR
from kb_eval.problems import Problem
from kb_eval.results import BaselineFile, HardwareInfo, baseline_path, read_model
from kb_eval.timing import TimingStats


@dataclass
class EvalContext:
    config: EvalConfig
    hardware: HardwareInfo
    backend: str
    device_kind: str  # cpu | cuda
    devices: list[str]  # GPU ids (as CUDA_VISIBLE_DEVICES names them) or ["cpu"]
    arch_list: str
    fingerprint: str
    invocation_dir: Path
    compiler_env: dict[str, str] = field(default_factory=dict)  # CXX: the pch front
    baseline: BaselineFile | None = None
    baseline_file: Path | None = None
    secret: int = field(default_factory=lambda: secrets.randbits(63), repr=False)

    @classmethod
    def create(cls, config: EvalConfig) -> "EvalContext":
        import torch

        cuda = torch.cuda.is_available()
        backend = config.resolved_backend(cuda)
        kind = config.device_kind(cuda)
        if kind == "cuda" and not cuda:
            raise UserError(f"backend {backend} needs a CUDA GPU and none is visible "
                            f"(use --backend cpp on a CPU machine)")
        hardware = HardwareInfo.detect("cuda" if kind == "cuda" else "cpu")
        devices = visible_gpus(config.devices) if kind == "cuda" else ["cpu"]
        arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or (hardware.capability or "")
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{secrets.token_hex(3)}"
        compiler_env = compiler_front(config)
        ctx = cls(config=config, hardware=hardware, backend=backend, device_kind=kind,
                  devices=devices, arch_list=arch,
                  fingerprint=toolchain_fingerprint(arch, front=compiler_env.get("CXX", "")),
                  invocation_dir=scratch_root(config) / "runs" / stamp,
                  compiler_env=compiler_env)
        if not config.live_baseline:
            ctx.baseline_file, ctx.baseline = load_baseline(config, hardware)
        return ctx

    # ---------------------------------------------------------------- seeds
    def problem_seed(self, problem: Problem) -> int:
        return derive_seed(self.secret, "problem", problem.key, self.config.precision)

    # ---------------------------------------------------------------- environments
    def _common_env(self) -> dict[str, str]:
        # Build and run children both see the same CXX: load_inline re-runs ninja in the
        # run child, and a changed compile command would make it compile again there.
        env = {"MAX_JOBS": str(self.config.max_jobs_per_build), **self.compiler_env}
        if self.arch_list:
            env["TORCH_CUDA_ARCH_LIST"] = self.arch_list
        return {**env, **self.config.extra_env}

    def build_env(self) -> dict[str, str]:
        return {**self._common_env(), "CUDA_VISIBLE_DEVICES": "", NICE_VAR: "10"}

    def device_env(self, device: str) -> dict[str, str]:
        visible = "" if device == "cpu" else device
        return {**self._common_env(), "CUDA_VISIBLE_DEVICES": visible}

    def torch_device(self, device: str) -> str:
        return "cpu" if device == "cpu" else "cuda:0"  # each child sees one GPU

    # ---------------------------------------------------------------- baseline
    def baseline_for(self, problem: Problem) -> TimingStats | None:
        if self.baseline is None:
            return None
        rec = self.baseline.records.get(problem.key)
        return rec.timing if rec is not None and rec.status == "ok" else None

    def baseline_peak(self, problem: Problem) -> int | None:
        """The reference's peak device memory measured by the baseline stage, if known."""
        rec = self.baseline.records.get(problem.key) if self.baseline is not None else None
        return rec.peak_mem_bytes if rec is not None else None

    def check_baseline_covers(self, problems: list[Problem]) -> None:
        """Every asked problem has an ok baseline record (else: a clear error)."""
        if self.baseline is None:
            return
        missing = [p.key for p in problems if self.baseline_for(p) is None]
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            shown = ", ".join(missing[:5]) + more
            raise UserError(f"{self.baseline_file} has no timing for {shown}: rerun "
                            f"`python -m kb_eval.baseline` for them, or pass --live-baseline")


def compiler_front(config: EvalConfig) -> dict[str, str]:
    """The environment that makes build children compile through pch.py (GCC only)."""
    real = os.environ.get("CXX", "c++")
    if not config.pch or not is_gcc(real):
        return {}
    return pch.install(Path(config.cache_dir) / "pch", real)


def visible_gpus(requested: list[str] | None) -> list[str]:
    """GPU names as this process's CUDA_VISIBLE_DEVICES has them (children get one each)."""
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = ([d.strip() for d in listed.split(",") if d.strip()] if listed
             else [str(i) for i in range(torch.cuda.device_count())])
    names = names[:torch.cuda.device_count()]
    if requested:
        unknown = [d for d in requested if d not in names]
        if unknown:
            raise UserError(f"GPU(s) {unknown} not visible (visible: {names})")
        return list(requested)
    return names


def load_baseline(config: EvalConfig, hardware: HardwareInfo) -> tuple[Path, BaselineFile]:
    path = baseline_path(config.results_dir, hardware.slug, config.precision)
    if not path.is_file():
        raise UserError(f"no baseline for {hardware.name} at {config.precision}: {path} is "
                        f"missing; run `python -m kb_eval.baseline --precision "
                        f"{config.precision}` on this machine, or pass --live-baseline")
    baseline = read_model(path, BaselineFile)
    if baseline.hardware.slug != hardware.slug or baseline.precision != config.precision:
        raise UserError(f"{path} was measured on {baseline.hardware.name} at "
                        f"{baseline.precision}, not {hardware.name} at {config.precision}")
    if baseline.timing.method != config.timing.method:
        raise UserError(f"{path} was timed with {baseline.timing.method!r}, this run with "
                        f"{config.timing.method!r}: refusing to mix timing methods")
    return path, baseline


def scratch_root(config: EvalConfig, min_free_gb: float = 8.0) -> Path:
    """Where each invocation's scratch files (candidate outputs, reference outputs) go:
    a RAM-backed /dev/shm when it has room (outputs of hundreds of MB per sample are
    written and read back there, several times faster than a disk), else the cache."""
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= min_free_gb * 2**30:
            return shm / f"kb_eval_{os.getuid()}"
    except OSError:
        pass
    return Path(config.cache_dir)
