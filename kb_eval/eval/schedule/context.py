"""EvalContext: what one evaluation invocation fixes before any sample runs: the secret
seed (this process only; children get per-problem derived seeds), the hardware, device
kind and GPUs, the toolchain fingerprint keying the build cache, the children's
environments, and the baseline (file, read on first need, or live).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kb_eval import devlock
from kb_eval.errors import UserError
from kb_eval.faults import armed_folder
from kb_eval.eval.schedule import nvcc_front, pch
from kb_eval.eval.schedule.build import front_name, is_gcc, toolchain_fingerprint
from kb_eval.eval.config import EvalConfig
from kb_eval.inputs import derive_seed
from kb_eval.eval.schedule import pinning
from kb_eval.isolation import NICE_VAR, sandbox
from kb_eval.problems import Problem
from kb_eval.results import BaselineFile, HardwareInfo, baseline_path, read_model
from kb_eval.timing import TIMED_PROCESS_ENV, TimingStats, method_for


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
    compiler_env: dict[str, str] = field(default_factory=dict)  # CXX, PYTORCH_NVCC: fronts
    # The baseline file last read, for messages and the run file (one source per run).
    baseline: BaselineFile | None = None
    baseline_file: Path | None = None
    # source label -> (path, file or None, why not): one baseline file per source.
    baselines: dict[str, tuple] = field(default_factory=dict)
    _baseline_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    secret: int = field(default_factory=lambda: secrets.randbits(63), repr=False)

    @classmethod
    def create(cls, config: EvalConfig) -> "EvalContext":
        import torch

        cuda = torch.cuda.is_available()
        backend = config.resolved_backend(cuda)
        kind = config.device_kind(cuda)
        if kind == "cuda" and config.cpu_lanes > 1:
            raise UserError("DEFAULTS[\"cpu_lanes\"] in the config is for the cpp backend on the "
                            "CPU (GPUs: --gpus)")
        if kind == "cuda" and not cuda:
            raise UserError(f"backend {backend} needs a CUDA GPU and none is visible "
                            f"(use --backend cpp on a CPU machine)")
        hardware = HardwareInfo.detect("cuda" if kind == "cuda" else "cpu")
        # The method names the clock actually used (a CPU run is not timed with CUDA events).
        method = method_for(kind, config.timing.flush_l2, config.timing.launch_cover_ms)
        if config.timing.method != method:
            config = config.model_copy(update={
                "timing": config.timing.model_copy(update={"method": method})})
        devices = visible_gpus(config.devices) if kind == "cuda" else cpu_lanes(config)
        arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or (hardware.capability or "")
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{secrets.token_hex(3)}"
        compiler_env = compiler_front(config)
        ctx = cls(config=config, hardware=hardware, backend=backend, device_kind=kind,
                  devices=devices, arch_list=arch,
                  fingerprint=toolchain_fingerprint(arch, front=front_name(compiler_env)),
                  invocation_dir=scratch_root(config) / "runs" / stamp,
                  compiler_env=compiler_env)
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
        return {**self._common_env(), "CUDA_VISIBLE_DEVICES": "", NICE_VAR: "19",
                **pinning.untimed_env(self.devices), **self.sandbox_env()}

    def device_env(self, device: str, sandboxed: bool = True) -> dict[str, str]:
        """A child's on `device`: a candidate's, sandboxed; the reference server's (trusted,
        never running candidate code), not."""
        visible = "" if is_cpu(device) else device
        return {**TIMED_PROCESS_ENV, **self._common_env(), "CUDA_VISIBLE_DEVICES": visible,
                **pinning.untimed_env(self.devices),
                **(self.sandbox_env() if sandboxed else {})}

    def sandbox_env(self) -> dict[str, str]:
        """The sandbox's policy for candidate children (none with --no-sandbox); each task
        narrows it to its own folders (build_allow)."""
        return sandbox_policy(self.config).to_env() if self.config.sandbox else {}

    def build_allow(self, extensions_dir: str | Path) -> dict[str, list[str]]:
        """What one task of a candidate may use besides its folder: its build's folder
        (read and write: torch's lock lives there), the compiler fronts (read)."""
        cache = Path(self.config.cache_dir)
        Path(extensions_dir).mkdir(parents=True, exist_ok=True)  # Triton's cache too
        return {"write": [str(extensions_dir), *armed_folder()], "read": [str(cache / "pch"),
                                                         str(cache / "nvcc")]}

    def run_allow(self, extensions_dir: str | Path, device: str) -> dict[str, list[str]]:
        """build_allow, and the device's lock files, which the run child holds: as files
        (written, never removed or replaced, which would split the lock)."""
        allow = self.build_allow(extensions_dir)
        lock = self.lock_path(device)
        lock.parent.mkdir(parents=True, exist_ok=True)
        files = [lock, Path(f"{lock}.gate")]
        if trace := os.environ.get(devlock.TRACE_VAR):
            files.append(Path(trace))
        for file in files:
            file.touch(exist_ok=True)
        allow["write"] += [str(f) for f in files]
        return allow

    def lock_path(self, device: str) -> Path:
        """The file of `device`'s timing lock (kb_eval/devlock.py), one per invocation."""
        return self.invocation_dir / "locks" / f"{device.replace('/', '_')}.lock"

    def torch_device(self, device: str) -> str:
        return "cpu" if is_cpu(device) else "cuda:0"  # each child sees one GPU

    # ---------------------------------------------------------------- baseline
    def _baseline(self, source: str, strict: bool) -> BaselineFile | None:
        """The baseline file of `source`, read once, from whichever thread asks first.
        None: live, or (not `strict`) missing or unusable; `strict` raises why instead."""
        if self.config.live_baseline:
            return None
        with self._baseline_lock:
            if source not in self.baselines:
                self.baselines[source] = self._read_baseline(source)
            path, data, error = self.baselines[source]
            self.baseline_file, self.baseline = path, data
        if error is not None and strict:
            raise error
        return data

    def _read_baseline(self, source: str) -> tuple[Path, BaselineFile | None, UserError | None]:
        cfg = self.config
        path = baseline_path(cfg.results_dir, self.hardware.slug, cfg.precision,
                             cfg.baseline_mode, source=source)
        if not path.is_file():
            return path, None, UserError(
                f"no baseline for {source} on {self.hardware.name} at {cfg.precision}: "
                f"{path} is missing; run `python -m kb_eval.baseline` with the same "
                f"--source and --precision {cfg.precision}{_compile_flag(cfg)} on this "
                f"machine, or pass --live-baseline")
        try:
            return path, load_baseline(cfg, self.hardware, path), None
        except UserError as e:
            return path, None, e

    def _baseline_record(self, problem: Problem):
        baseline = self._baseline(problem.source, strict=False)
        return baseline.records.get(problem.key) if baseline is not None else None

    def baseline_for(self, problem: Problem) -> TimingStats | None:
        rec = self._baseline_record(problem)
        return rec.timing if rec is not None and rec.status == "ok" else None

    def baseline_peak(self, problem: Problem) -> int | None:
        """The reference's peak device memory measured by the baseline stage, if known."""
        rec = self._baseline_record(problem)
        return rec.peak_mem_bytes if rec is not None else None

    def check_baseline_covers(self, problems: list[Problem]) -> None:
        """Every asked problem has an ok baseline record (else: a clear error); reads each
        source's file now, so that a missing or mismatched one stops the run before work."""
        if self.config.live_baseline:
            return
        for source in dict.fromkeys(p.source for p in problems):
            self._baseline(source, strict=True)
        missing = [p.key for p in problems if self.baseline_for(p) is None]
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            shown = ", ".join(missing[:5]) + more
            raise UserError(f"{self.baseline_file} has no timing for {shown}: rerun "
                            f"`python -m kb_eval.baseline` for them, or pass --live-baseline")


def _compile_flag(cfg: EvalConfig) -> str:
    mode = cfg.baseline_mode
    if mode.startswith("tvm"):
        return f" --compile {mode}"
    return f" --compile {mode.removeprefix('compile-')}" if mode != "eager" else ""


def create_checked(config: EvalConfig, problems: list[Problem], may_go_live: bool
                   ) -> tuple["EvalContext", str | None]:
    """The context, its baseline checked to cover every asked problem. Without a usable
    file and with `may_go_live` (no baseline file asked for by name), the reference is
    timed live instead, and the second value says why."""
    ctx = EvalContext.create(config)
    if config.live_baseline:
        return ctx, None
    try:
        ctx.check_baseline_covers(problems)
        return ctx, None
    except UserError as e:
        if not may_go_live:
            raise
        ctx.config = ctx.config.model_copy(update={"live_baseline": True})
        ctx.baseline = ctx.baseline_file = None
        return ctx, f"{e}\nnote: timing the PyTorch reference live in this run instead"


def cpu_lanes(config: EvalConfig) -> list[str]:
    """The CPU's device lanes: one ("cpu"), or `cpu_lanes` named cpu0, cpu1, ...: stand-ins
    for GPUs that exercise multi-device scheduling on a CPU machine (their timings share
    the cores)."""
    n = config.cpu_lanes
    return ["cpu"] if n == 1 else [f"cpu{i}" for i in range(n)]


def is_cpu(device: str) -> bool:
    """Whether a lane's device name is the CPU (or a CPU stand-in, cpu_lanes)."""
    return device.startswith("cpu")


def compiler_front(config: EvalConfig) -> dict[str, str]:
    """The environment that makes build children compile C++ through pch.py (GCC only)
    and CUDA through nvcc_front.py (when torch finds nvcc)."""
    env = {}
    real = os.environ.get("CXX", "c++")
    if config.pch and is_gcc(real):
        env.update(pch.install(Path(config.cache_dir) / "pch", real))
    nvcc = nvcc_front.real_nvcc() if config.slim_cuda_header else None
    if nvcc:
        env.update(nvcc_front.install(Path(config.cache_dir) / "nvcc", nvcc))
    return env


def sandbox_policy(config: EvalConfig) -> sandbox.Policy:
    """Layer one of the sandbox for this run's candidate children (isolation/sandbox.py);
    its folders are made now, since only folders that exist can be bound or allowed."""
    from kb_eval.eval.schedule.sample import run_scratch

    cache = Path(config.cache_dir)
    write = [scratch_root(config), run_scratch(), cache / "builds", cache / "pch"]
    write += [Path(f) for f in armed_folder()]  # the fault suite's points, fired by children
    for folder in [*write, cache / "nvcc"]:
        folder.mkdir(parents=True, exist_ok=True)
    if trace := os.environ.get(devlock.TRACE_VAR):  # else hidden under the child's own /tmp
        Path(trace).touch(exist_ok=True)
        write.append(Path(trace))
    return sandbox.Policy(write=[str(p) for p in write], read=[str(cache / "nvcc")])


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


def load_baseline(config: EvalConfig, hardware: HardwareInfo, path: Path) -> BaselineFile:
    """A baseline file that matches this evaluation's hardware, precision and timing."""
    baseline = read_model(path, BaselineFile)
    if baseline.hardware.slug != hardware.slug or baseline.precision != config.precision:
        raise UserError(f"{path} was measured on {baseline.hardware.name} at "
                        f"{baseline.precision}, not {hardware.name} at {config.precision}")
    if baseline.timing.method != config.timing.method:
        raise UserError(f"{path} was timed with {baseline.timing.method!r}, this run with "
                        f"{config.timing.method!r}: refusing to mix timing methods")
    return baseline


def scratch_root(config: EvalConfig, min_free_gb: float = 8.0) -> Path:
    """Where each invocation's scratch files (candidate and reference outputs) go: a
    RAM-backed /dev/shm when it has room, else the cache."""
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= min_free_gb * 2**30:
            return shm / f"kb_eval_{os.getuid()}"
    except OSError:
        pass
    return Path(config.cache_dir)
