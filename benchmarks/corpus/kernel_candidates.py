"""Candidates with a load_inline CUDA kernel, in the places trained models build them: at
import, in `__init__`, in the first `forward`, or at import and again in `__init__`;
guarded by `torch.cuda.is_available()` with try/except and a PyTorch fallback or not;
with extra_cuda_cflags or not. `KernelSpec` says what one computes; `kernel_candidate`
writes the file.
"""

from __future__ import annotations

from dataclasses import dataclass

BUILD = ('load_inline(name="{name}", cpp_sources=DECL, cuda_sources=SOURCE, '
         'functions=["run"], verbose=False{cflags})')

CFLAGS = {None: "", "fast": ', extra_cuda_cflags=["-O3", "--use_fast_math"]',
          "O3": ', extra_cuda_cflags=["-O3"]'}


@dataclass
class KernelSpec:
    """One kernel candidate's computation. head: imports and a `Base` module with the
    reference's attributes; src/decl: the CUDA source and its declaration; sig: forward's
    parameters; body: forward's lines (calling `self._kernel(y)` on a contiguous tensor);
    run_args: what follows y in ext.run(...); fallback: PyTorch lines of y, ending in a
    return."""
    level: int
    pid: int
    head: str
    src: str
    decl: str
    sig: str
    body: list[str]
    run_args: str
    fallback: list[str]


def _indent(lines: list[str], n: int) -> str:
    return "\n".join(" " * n + ln for ln in lines)


def _guarded(target: str, build: str) -> list[str]:
    """`target = build` when CUDA is there and the build works; None otherwise."""
    return [f"{target} = None", "if torch.cuda.is_available():", "    try:",
            f"        {target} = {build}",
            "    except Exception as err:  # no compiler, no GPU: PyTorch does the work",
            f'        print(f"custom kernel unavailable, using PyTorch: {{err}}", file=sys.stderr)']


def kernel_candidate(spec: KernelSpec, name: str, place: str, guard: bool,
                     cflags: str | None) -> str:
    """place: import | init | forward | both (import and __init__, the second build with
    the fast-math flags, which forward uses)."""
    build = BUILD.format(name=name, cflags=CFLAGS[cflags])
    module, init, first = [], [], []
    if place in ("import", "both"):
        module = _guarded("_EXT", build) if guard else [f"_EXT = {build}"]
        ext = "_EXT"
    if place in ("init", "both"):
        second = build if place == "init" else BUILD.format(name=name + "_fast",
                                                           cflags=CFLAGS["fast"])
        init = _guarded("self._ext", second) if guard else [f"self._ext = {second}"]
        ext = "self._ext"
    if place == "forward":
        module = ["_LAZY = []  # the extension, built by the first call"]
        cond = "not _LAZY and torch.cuda.is_available()" if guard else "not _LAZY"
        first = [f"if {cond}:", f"    _LAZY.append({build})"]
        ext = "_LAZY[0] if _LAZY else None"
    text = spec.head + "\n" + "\n".join([
        "", 'SOURCE = r"""' + spec.src + '"""', f'DECL = "{spec.decl}"', *module, "", "",
        "class ModelNew(Base):",
        "    def __init__(self, *args):",
        "        super().__init__(*args)",
        *["        " + ln for ln in init], "",
        "    def _kernel(self, y):",
        f"        ext = {ext}",
        "        if ext is None:",
        _indent(spec.fallback, 12),
        f"        return ext.run(y{spec.run_args})", "",
        f"    def forward(self, {spec.sig}):",
        *["        " + ln for ln in first],
        _indent(spec.body, 8)])
    imports = "import sys\n" * ("sys.stderr" in text)
    return imports + "from torch.utils.cpp_extension import load_inline\n" + text
