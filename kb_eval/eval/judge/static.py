"""Static checks of a candidate's source (parsed with `ast`, never run): `no_custom_kernel`
(speedup not counted), `suspicious_code` (what exploits use and honest kernels need not),
`monkeypatch` (assignments to imported modules' attributes). Heuristics only: the runtime
checks do not rely on them.
"""

from __future__ import annotations

import ast
import re

from kb_eval.results import Flag

KERNEL_CALLS = {"load_inline", "RawKernel", "RawModule", "ElementwiseKernel",
                "ReductionKernel"}
KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}  # triton.* / numba.cuda.*
SUSPICIOUS_MODULES = {"gc": "gc", "inspect": "inspect", "ctypes": "ctypes",
                      "threading": "threads", "_thread": "threads",
                      "concurrent": "threads", "multiprocessing": "processes",
                      "subprocess": "processes", "signal": "signals", "kb_eval": "the evaluator",
                      "builtins": "builtins", "importlib": "importlib",
                      "sys": None, "os": None}
SUSPICIOUS_ATTRS = {"_getframe": "sys._getframe", "settrace": "trace hooks",
                    "setprofile": "profile hooks", "fork": "os.fork", "forkpty": "os.fork",
                    "kill": "os.kill", "killpg": "os.kill", "system": "os.system",
                    "popen": "os.popen", "execv": "os.exec", "execve": "os.exec",
                    "Stream": "side streams", "ExternalStream": "side streams",
                    "__code__": "code objects", "get_objects": "gc", "get_referrers": "gc",
                    "f_locals": "frames", "f_back": "frames", "f_globals": "frames"}
NEEDS_BASE = {"kill": ("os",), "killpg": ("os",), "system": ("os",), "popen": ("os",),
              "execv": ("os",), "execve": ("os",), "fork": ("os",), "forkpty": ("os",),
              "Stream": ("torch.cuda", "cuda"), "ExternalStream": ("torch.cuda", "cuda")}
ALLOWED_PATCHES = {"torch.backends.cudnn.benchmark"}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Scan(ast.NodeVisitor):
    def __init__(self):
        self.kernel = False
        self.modules: dict[str, str] = {}  # local name -> module imported
        self.suspicious: set[str] = set()
        self.patches: set[str] = set()

    # imports
    def visit_Import(self, node):
        for a in node.names:
            self.modules[(a.asname or a.name).split(".")[0]] = a.name
            self._note_module(a.name)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        self._note_module(mod)
        for a in node.names:
            self.modules[a.asname or a.name] = f"{mod}.{a.name}"
            if a.name in SUSPICIOUS_ATTRS and a.name not in ("Stream", "system", "kill"):
                self.suspicious.add(SUSPICIOUS_ATTRS[a.name])

    def _note_module(self, name: str) -> None:
        root = name.split(".")[0]
        what = SUSPICIOUS_MODULES.get(root)
        if what:  # importing a kernel library is not building: a kernel must be declared
            self.suspicious.add(what)

    # kernels
    def visit_Call(self, node):
        name = _dotted(node.func) or ""
        root = name.split(".")[0]
        full = self.modules.get(root, root) + name[len(root):]  # through import aliases
        if full.rsplit(".", 1)[-1] in KERNEL_CALLS or full.endswith("cpp_extension.load"):
            self.kernel = True
        if name == "setattr" and node.args:
            target = _dotted(node.args[0])
            if target and target.split(".")[0] in self.modules:
                self.patches.add(f"setattr({target}, ...)")
        if name in ("open", "io.open") and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and any(c in str(node.args[1].value) for c in "wax+"):
            self.suspicious.add("writes to files")
        self.generic_visit(node)

    def _decorators(self, node):
        for d in node.decorator_list:
            name = _dotted(d.func if isinstance(d, ast.Call) else d) or ""
            root, last = name.split(".")[0], name.rsplit(".", 1)[-1]
            origin = self.modules.get(root, root)
            if last in KERNEL_DECORATORS and (origin.startswith(("triton", "numba")) or
                                               "cuda" in name):
                self.kernel = True

    def visit_FunctionDef(self, node):
        self._decorators(node)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    # attribute uses and assignments
    def visit_Attribute(self, node):
        what = SUSPICIOUS_ATTRS.get(node.attr)
        base = _dotted(node.value) or ""
        needs = NEEDS_BASE.get(node.attr)
        if what and (needs is None or base in needs):
            self.suspicious.add(what)
        self.generic_visit(node)

    def _assigned(self, targets):
        for t in targets:
            for node in ast.walk(t):
                if isinstance(node, ast.Attribute):
                    name = _dotted(node)
                    if name and name.split(".")[0] in self.modules and name not in ALLOWED_PATCHES \
                            and not isinstance(getattr(node, "ctx", None), ast.Load):
                        self.patches.add(name)

    def visit_Assign(self, node):
        self._assigned(node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._assigned([node.target])
        self.generic_visit(node)

    def visit_Delete(self, node):
        self._assigned(node.targets)
        self.generic_visit(node)


_TRITON_JIT = re.compile(r"@\s*triton\s*\.\s*(jit|autotune)")


def static_flags(source: str) -> list[Flag]:
    try:
        tree = ast.parse(source)
        scan = _Scan()
        scan.visit(tree)
    except (SyntaxError, RecursionError, ValueError):
        return []
    flags = []
    if not (scan.kernel or _TRITON_JIT.search(source)):
        flags.append(Flag(code="no_custom_kernel", severity="warning",
                          message="no custom kernel is built (no load_inline, cpp_extension."
                                  "load, @triton.jit, ...): PyTorch ops only; speedup not counted"))
    if scan.suspicious:
        flags.append(Flag(code="suspicious_code", severity="warning",
                          message="uses " + ", ".join(sorted(scan.suspicious))))
    if scan.patches:
        flags.append(Flag(code="monkeypatch", severity="warning",
                          message="assigns to module attributes: " +
                                  ", ".join(sorted(scan.patches)[:8])))
    return flags
