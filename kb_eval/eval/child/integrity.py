"""Tripwires for in-process tampering (candidate child side).

Before candidate code runs, a `Snapshot` records what timing, comparing, seeding and
reporting rely on: functions at fixed paths (PROTECTED, by identity and code), every global
of our own modules and timer classes, sys.modules entries, builtins, trace hooks and the
numerics switches. `changes()` lists what differs (a `tampered` flag); after every timed
call only the timer's part is checked (`timer_only`: cheap enough not to slow launches).
A tripwire, not a wall: docs/GUARANTEES.md lists the defenses that do not trust the child.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import sys
from typing import Any

# (module, attribute path) of what a timer, checker or reporter relies on. Not
# torch.cuda.default_generators: CUDA's start replaces it (a dead seeding shows anyway).
PROTECTED = [
    ("time", p) for p in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                          "time", "time_ns", "process_time", "sleep")
] + [
    ("torch", p) for p in (
        "cuda.synchronize", "cuda.Event", "cuda.Event.record", "cuda.Event.elapsed_time",
        "cuda.Event.synchronize", "cuda.Event.query", "cuda.Event.wait", "cuda.Event.__init__",
        "cuda.Event.__new__", "cuda.current_stream", "cuda.default_stream", "cuda.set_device",
        "cuda.current_device", "cuda.get_device_properties", "cuda.Stream", "cuda.stream",
        "cuda.is_available", "allclose", "equal", "isclose", "testing.assert_close",
        "save", "load", "manual_seed", "default_generator",
        "randn", "rand", "randint", "empty", "zeros", "no_grad",
        "device", "Tensor", "Tensor.clone", "Tensor.to", "Tensor.cpu", "Tensor.contiguous",
        "Tensor.detach", "Tensor.zero_", "Tensor.data_ptr", "Tensor.untyped_storage",
        "Tensor.isnan", "Tensor.nan_to_num", "Tensor.__eq__", "nn.Module.__call__",
        "_C._cuda_synchronize", "_utils._CudaEventBase")
] + [
    ("statistics", p) for p in ("median", "fmean", "stdev", "quantiles")
] + [
    ("os", p) for p in ("urandom", "replace", "write", "_exit", "getpid")
] + [("secrets", "randbelow"), ("secrets", "randbits"), ("json", "dumps"), ("json", "dump"),
     ("gc", "collect"), ("gc", "disable"), ("gc", "enable"), ("hashlib", "sha256")]

# checked after every timed call (the rest after each round)
TIMER_PATHS = [(m, p) for m, p in PROTECTED if m in ("time", "gc") or p.startswith(
    ("cuda.synchronize", "cuda.Event", "cuda.current_stream", "cuda.default_stream",
     "cuda.stream", "cuda.Stream", "_C._cuda_synchronize", "_utils._CudaEventBase"))]

# our own modules (every global name) and the classes that time and judge
OWN_MODULES = ("kb_eval.timing", "kb_eval.timing_plan", "kb_eval.clocks", "kb_eval.inputs",
               "kb_eval.harness",
               "kb_eval.problems", "kb_eval.isolation", "kb_eval.isolation.child",
               "kb_eval.eval.child.worker", "kb_eval.eval.child.calls",
               "kb_eval.eval.child.observe", "kb_eval.eval.child.probes",
               "kb_eval.eval.child.threads", "kb_eval.eval.child.integrity",
               "kb_eval.eval.wire.outputs")
OWN_CLASSES = [("kb_eval.timing", "_CpuTimer"), ("kb_eval.timing", "_CudaTimer"),
               ("kb_eval.timing", "TimingStats"), ("kb_eval.timing", "TimingSettings"),
               ("kb_eval.timing_plan", "TimingStats"),
               ("kb_eval.timing_plan", "TimingSettings"),
               ("kb_eval.eval.child.integrity", "Snapshot"), ("kb_eval.eval.child.calls", "Watch"),
               ("kb_eval.eval.child.calls", "TimedCalls"),
               ("kb_eval.eval.child.threads", "Ledger")]
TIMER_MODULES = ("kb_eval.timing", "kb_eval.timing_plan", "kb_eval.clocks")
TIMER_CLASSES = [c for c in OWN_CLASSES if c[1] in ("_CpuTimer", "_CudaTimer")]


def _fingerprint(obj: Any) -> tuple:
    """Identity of an object and, for Python functions, of what decides their behaviour."""
    func = getattr(obj, "__func__", obj)  # classmethod / staticmethod / bound method
    if inspect.isfunction(func):
        return (id(obj), id(func), id(func.__code__), id(func.__defaults__),
                id(func.__kwdefaults__), id(func.__closure__), id(func.__globals__))
    return (id(obj), id(func))


def _resolve(module: str, path: str) -> Any:
    """The object at module.path, taking the last step statically (descriptors as such)."""
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    parts = path.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        return inspect.getattr_static(obj, parts[-1])
    return getattr(obj, parts[-1])


def _numerics() -> dict[str, Any]:
    import torch

    be = torch.backends
    values = {
        "cuda.matmul.allow_tf32": be.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": be.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            be.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            be.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    for name, holder in (("fp32_precision", be), ("cuda.matmul.fp32_precision", be.cuda.matmul),
                         ("cudnn.conv.fp32_precision", getattr(be.cudnn, "conv", None)),
                         ("cudnn.rnn.fp32_precision", getattr(be.cudnn, "rnn", None))):
        if holder is not None and hasattr(holder, "fp32_precision"):
            values[name] = holder.fp32_precision
    return values


def _disabled_dynamo_of(new: Any, old: Any) -> bool:
    """Whether `new` is `torch._disable_dynamo(old)` (dynamo wraps `torch.manual_seed` when
    it loads): checked by the wrapper's code object and by what it wraps."""
    if "torch._dynamo" not in sys.modules or getattr(new, "__wrapped__", None) is not old:
        return False
    import torch

    try:
        reference = torch._disable_dynamo(lambda: None)
    except Exception:  # noqa: BLE001 - an older torch without it: not PyTorch's wrapper
        return False
    if getattr(new, "__code__", None) is not reference.__code__:
        return False
    cells = [c.cell_contents for c in (new.__closure__ or ())]
    return any(c is old for c in cells)


# Protected objects that PyTorch's own lazy machinery replaces, and how to recognise it.
LAZY_MACHINERY = {"torch.manual_seed": _disabled_dynamo_of}


_MISSING = object()


def _steps(module: str, path: str) -> list[tuple[Any, str, Any]]:
    """(namespace, name, object) for each lookup from sys.modules to module.path, compared
    by identity; names found in a base class, or missing, are pinned absent before it."""
    obj: Any = sys.modules[module]
    steps = [(sys.modules, module, obj)]
    for part in path.split("."):
        owners = obj.__mro__ if inspect.isclass(obj) else (obj,)
        for owner in owners:
            space = vars(owner)
            if part in space:
                obj = space[part]
                steps.append((space, part, obj))
                break
            steps.append((space, part, _MISSING))
        else:
            return steps
    return steps


def _inner(obj: Any) -> tuple | None:
    """A Python function's parts that decide what it does (None for other objects)."""
    func = getattr(obj, "__func__", obj)
    if not inspect.isfunction(func):
        return None
    return (func, func.__code__, func.__defaults__, func.__kwdefaults__, func.__closure__,
            func.__globals__)


class Snapshot:
    """What the protected objects are now; `changes()` says what differs later."""

    def __init__(self):
        self.items = self._take()
        self.lazy = {key: _resolve(*key.split(".", 1)) for key in LAZY_MACHINERY}
        self._timer = self._timer_identities()

    def _timer_identities(self) -> tuple | None:
        """The timer's part as identities (None: a path does not resolve; the slow way then)."""
        try:
            steps = [st for m, p in TIMER_PATHS for st in _steps(m, p)]
            for name in TIMER_MODULES:
                mod = sys.modules[name]
                steps.append((sys.modules, name, mod))
                steps += [(vars(mod), k, v) for k, v in vars(mod).items()
                          if not k.startswith("__")]
            for module, cls_name in TIMER_CLASSES:
                cls = getattr(sys.modules[module], cls_name)
                steps += [(vars(cls), k, v) for k, v in vars(cls).items()
                          if not k.startswith("__") or k in ("__init__", "__call__", "__new__")]
        except (AttributeError, KeyError, TypeError):  # TypeError: a step without vars()
            return None
        funcs = [f for f in (_inner(v) for _, _, v in steps) if f is not None]
        return steps, funcs, sys.gettrace(), sys.getprofile(), _numerics()

    def _timer_unchanged(self) -> bool:
        if self._timer is None:
            return False
        steps, funcs, trace, profile, numerics = self._timer
        return (all(space.get(name, _MISSING) is obj for space, name, obj in steps)
                and all(_inner(f[0]) == f for f in funcs)
                and sys.gettrace() is trace and sys.getprofile() is profile
                and _numerics() == numerics)

    def _accept_lazy(self, changed: list[str]) -> list[str]:
        """Drop the changes PyTorch itself made (and take them as the new baseline)."""
        kept = []
        for key in changed:
            check = LAZY_MACHINERY.get(key)
            new = _resolve(*key.split(".", 1)) if check else None
            if check and check(new, self.lazy[key]):
                self.items[key], self.lazy[key] = _fingerprint(new), new
            else:
                kept.append(key)
        return kept

    @staticmethod
    def _take(timer_only: bool = False) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for module, path in TIMER_PATHS if timer_only else PROTECTED:
            try:
                items[f"{module}.{path}"] = _fingerprint(_resolve(module, path))
            except (AttributeError, ImportError):
                items[f"{module}.{path}"] = None
        for name in TIMER_MODULES if timer_only else OWN_MODULES:
            mod = sys.modules.get(name)
            items[f"sys.modules[{name}]"] = id(mod)
            if mod is not None:
                for key, value in vars(mod).items():
                    if not key.startswith("__"):
                        items[f"{name}.{key}"] = _fingerprint(value)
        for module, cls_name in TIMER_CLASSES if timer_only else OWN_CLASSES:
            cls = getattr(sys.modules.get(module), cls_name, None)
            if cls is not None:
                for key, value in vars(cls).items():
                    if not key.startswith("__") or key in ("__init__", "__call__", "__new__"):
                        items[f"{module}.{cls_name}.{key}"] = _fingerprint(value)
        if not timer_only:
            for key, value in vars(builtins).items():
                items[f"builtins.{key}"] = id(value)
        items["sys.gettrace"] = id(sys.gettrace())
        items["sys.getprofile"] = id(sys.getprofile())
        for key, value in _numerics().items():
            items[f"torch.backends.{key}"] = value
        return items

    def changes(self, timer_only: bool = False) -> list[str]:
        """What differs from the snapshot: everything, or (`timer_only`) what a timer
        relies on (names new since the snapshot count only in the full check)."""
        if timer_only and self._timer_unchanged():
            return []
        now = self._take(timer_only)
        if timer_only:
            changed = [k for k, v in now.items() if self.items.get(k, v) != v]
        else:
            changed = [k for k, v in self.items.items() if now.get(k) != v]
            changed += [k for k in now if k not in self.items and not k.startswith("builtins.")]
        return sorted(self._accept_lazy(changed))
