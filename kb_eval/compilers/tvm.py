"""Apache TVM as a baseline: the reference exported with torch.export, imported to Relax,
compiled for the device (DLight schedules; `--tvm-tune N`: MetaSchedule first) and timed
like eager. The mode string (`tvm`, `tvm-noarch`, `tvm-tune64`, ...) carries the options.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from kb_eval.compilers.flags import tvm_mode

DEFAULT_CACHE = Path(".cache/kb_eval/tvm")


class TvmUnsupported(RuntimeError):
    """TVM cannot export, import or build this problem (the reason is the message)."""


@dataclass(frozen=True)
class TvmOptions:
    arch: bool = True  # name the GPU architecture in the target
    tune_trials: int = 0  # MetaSchedule trials per task (0: DLight schedules only)

    @property
    def mode(self) -> str:
        return tvm_mode(self.arch, self.tune_trials)

    @classmethod
    def parse(cls, mode: str) -> "TvmOptions":
        m = re.fullmatch(r"tvm(-noarch)?(?:-tune(\d+))?", mode)
        if m is None:
            raise ValueError(f"not a TVM mode: {mode!r}")
        return cls(arch=m.group(1) is None, tune_trials=int(m.group(2) or 0))


def is_tvm_mode(mode: str) -> bool:
    return mode == "tvm" or mode.startswith("tvm-")


# the generic target names sm_50 explicitly (plain `cuda` would take the GPU's own)
GENERIC_CUDA_ARCH = "sm_50"


def make_target(device: torch.device, arch: bool = True):
    import tvm
    if device.type != "cuda":
        return tvm.target.Target("llvm")
    if not arch:
        return tvm.target.Target({"kind": "cuda", "arch": GENERIC_CUDA_ARCH})
    major, minor = torch.cuda.get_device_capability(device)
    return tvm.target.Target({"kind": "cuda", "arch": f"sm_{major}{minor}"})


def target_facts(target, options: TvmOptions) -> dict:
    """The build's facts for the baseline record: target, arch and where the arch came from."""
    arch = target.attrs.get("arch")
    return {"target": str(target), "arch": str(arch) if arch is not None else None,
            "arch_source": ("host (llvm)" if target.kind.name != "cuda" else "device"
                            if options.arch else f"generic ({GENERIC_CUDA_ARCH}, "
                            "--compile tvm-noarch)"),
            "tune_trials": options.tune_trials}


def compile_tvm(model: torch.nn.Module, example_inputs: list, device: torch.device,
                options: TvmOptions = TvmOptions(),
                cache_dir: Path | None = None) -> tuple[Callable, dict]:
    """(callable taking and returning torch tensors, facts about the build). Raises
    TvmUnsupported with the stage that failed and why."""
    try:
        import tvm
        from tvm import relax
    except ImportError as e:  # the extra is not installed: every problem says so
        raise TvmUnsupported(f"apache-tvm is not installed ({e}); pip install "
                             f"'kb-eval[tvm]'") from None
    mod, params = _import(model, example_inputs)
    target = make_target(device, options.arch)
    try:
        if options.tune_trials:
            mod = _tune(mod, target, options.tune_trials, cache_dir or DEFAULT_CACHE)
        executable = tvm.compile(mod, target=target)
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds; all mean "cannot build"
        raise TvmUnsupported(f"TVM build failed: {_first_line(e)}") from None
    dev = tvm.cuda(device.index or 0) if device.type == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(executable, dev)
    # Kept alive here: the TVM views below borrow these tensors' memory (DLPack).
    held = [torch.from_dlpack(p).to(device).contiguous() for p in params]
    weights = [tvm.runtime.from_dlpack(t) for t in held]
    main = vm["main"]
    single = isinstance(model(*example_inputs), torch.Tensor)

    def call(*inputs: torch.Tensor) -> Any:
        args = [tvm.runtime.from_dlpack(x.contiguous()) for x in inputs]
        out = main(*args, *weights)
        outs = [torch.from_dlpack(o) for o in out] if _is_seq(out) else [torch.from_dlpack(out)]
        return outs[0] if single and len(outs) == 1 else tuple(outs)

    return call, target_facts(target, options)


def _import(model: torch.nn.Module, example_inputs: list):
    """torch.export, then Relax with the weights as inputs (not folded into the IR)."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    try:
        exported = torch.export.export(model, tuple(example_inputs))
    except Exception as e:  # noqa: BLE001
        raise TvmUnsupported(f"torch.export failed: {_first_line(e)}") from None
    try:
        mod = from_exported_program(exported, keep_params_as_input=True)
    except Exception as e:  # noqa: BLE001
        raise TvmUnsupported(f"TVM Relax import failed: {_first_line(e)}") from None
    mod, params = relax.frontend.detach_params(mod)
    return mod, list(params.get("main", []))


def _tune(mod, target, trials: int, cache_dir: Path):
    """MetaSchedule with `trials` per task, reusing a database with at least as many."""
    from tvm import relax
    key = hashlib.sha256((mod.script() + str(target)).encode()).hexdigest()[:16]
    work = Path(cache_dir) / key
    marker = work / "kb_eval_tuned.json"
    done = json.loads(marker.read_text())["trials"] if marker.exists() else 0
    work.mkdir(parents=True, exist_ok=True)
    pipeline = relax.get_pipeline("static_shape_tuning", target=target, work_dir=str(work),
                                  total_trials=0 if done >= trials else trials * 1000,
                                  max_trials_per_task=trials)
    mod = pipeline(mod)
    if done < trials:
        tmp = marker.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps({"trials": trials}))
        tmp.replace(marker)
    return mod


def _is_seq(x) -> bool:
    return not hasattr(x, "shape") and hasattr(x, "__len__")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM puts the message last after its own traceback; torch puts it first.
    for ln in reversed(lines):
        if re.search(r"(Error|error|unsupported|Unsupported|not supported)", ln):
            return f"{type(e).__name__}: {ln.strip()[:300]}"
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else type(e).__name__


def baseline_callable(model: torch.nn.Module, module, secret: int, precision: str,
                      device: torch.device, mode: str) -> Callable:
    """(callable, target_facts) of the reference compiled by TVM, exported on one set of
    the problem's inputs; the tuning database goes to $KB_EVAL_TVM_CACHE."""
    from kb_eval.harness import inputs_for
    example = inputs_for(module, secret, "tvm-export", precision, device)
    cache = Path(os.environ.get("KB_EVAL_TVM_CACHE", DEFAULT_CACHE))
    with torch.no_grad():
        return compile_tvm(model, example, device, TvmOptions.parse(mode), cache)
