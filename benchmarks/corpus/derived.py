"""Candidates built on the problem's own network, as most model-written candidates without a
custom kernel are: the reference's classes (read from the problem file at generation time,
`Model` renamed `_Net`, get_inputs and get_init_inputs dropped) and a `ModelNew(_Net)`
that keeps its parameters (same state_dict) and changes how it runs: CUDA-graph replay,
torch.compile, half precision under autocast (wrong), one batch row at a time (slow), a
shape bug (crash) or a huge workspace (out of memory).
"""

from __future__ import annotations

import ast
from pathlib import Path

DROPPED = {"get_inputs", "get_init_inputs"}


class _Rename(ast.NodeTransformer):
    def visit_ClassDef(self, node):
        if node.name == "Model":
            node.name = "_Net"
        self.generic_visit(node)
        return node

    def visit_Name(self, node):
        if node.id == "Model":
            node.id = "_Net"
        return node


def network_source(problem_file: Path) -> str:
    """The problem's module without its input functions, `Model` renamed `_Net`."""
    tree = ast.parse(problem_file.read_text())
    tree.body = [n for n in tree.body
                 if not (isinstance(n, ast.FunctionDef) and n.name in DROPPED)]
    tree = ast.fix_missing_locations(_Rename().visit(tree))
    return ast.unparse(tree) + "\n"


PLAIN = '''

class ModelNew(_Net):
    """The reference network, unchanged: the speed comes from the backend switches."""
'''

GRAPHS = '''

class ModelNew(_Net):
    """The reference network replayed from a CUDA graph captured once per input shape."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._graphs = {}

    def forward(self, *inputs):
        if not torch.cuda.is_available() or not inputs[0].is_cuda:
            return super().forward(*inputs)
        key = tuple((tuple(t.shape), t.dtype) if torch.is_tensor(t) else t for t in inputs)
        if key not in self._graphs:
            self._graphs[key] = self._capture(inputs)
        graph, static_in, static_out = self._graphs[key]
        for dst, src in zip(static_in, inputs):
            if torch.is_tensor(dst):
                dst.copy_(src)
        graph.replay()
        return static_out.clone()

    def _capture(self, inputs):
        static_in = [t.clone() if torch.is_tensor(t) else t for t in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up: cuDNN picks its algorithms outside the capture
                super().forward(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = super().forward(*static_in)
        return graph, static_in, static_out
'''

COMPILE = '''

class ModelNew(_Net):
    """The reference network through torch.compile, compiled on the first call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = None

    def forward(self, *inputs):
        if self._compiled is None:
            self._compiled = torch.compile(super().forward{mode})
        return self._compiled(*inputs)
'''

AUTOCAST = '''

class ModelNew(_Net):
    """The reference network in half precision (wrong: fp16 rounding is far outside the
    float32 tolerance)."""

    def forward(self, *inputs):
        if torch.cuda.is_available() and inputs[0].is_cuda:
            with torch.autocast("cuda", dtype=torch.float16):
                return super().forward(*inputs).float()
        return super().forward(*inputs)
'''

ROWS = '''

class ModelNew(_Net):
    """The reference network one batch row at a time (correct, and slow)."""

    def forward(self, x, *rest):
        return torch.cat([super(ModelNew, self).forward(x[i:i + 1], *rest)
                          for i in range(x.shape[0])])
'''

FLATTEN = '''

class ModelNew(_Net):
    """Flattens its input first (crashes: the network wants the batch's image shape)."""

    def forward(self, x, *rest):
        return super().forward(x.reshape(x.shape[0], -1), *rest)
'''

WORKSPACE = '''

class ModelNew(_Net):
    """Allocates a scratch buffer sized in elements where it meant bytes of bytes (out of
    memory on any device)."""

    def forward(self, x, *rest):
        scratch = torch.empty(x.numel() << 24, device=x.device, dtype=x.dtype)
        out = super().forward(x, *rest)
        return out + 0 * scratch[0]
'''

WRAPPERS = {"plain": PLAIN, "graphs": GRAPHS, "compile": COMPILE, "autocast": AUTOCAST,
            "rows": ROWS, "flatten": FLATTEN, "workspace": WORKSPACE}
EXPECTED = {"autocast": ("incorrect", "half precision under autocast"),
            "flatten": ("error", "a shape bug: the input flattened"),
            "workspace": ("error", "out of memory: a huge scratch buffer")}


def derived_candidate(problem_file: Path, wrapper: str, compile_mode: str = "") -> str:
    """A candidate on the problem's own network (module docstring)."""
    text = WRAPPERS[wrapper]
    if wrapper == "compile":
        text = text.format(mode=f", mode={compile_mode!r}" if compile_mode else "")
    return network_source(problem_file) + text
