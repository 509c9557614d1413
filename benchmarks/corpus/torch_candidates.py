"""Hand-written candidates without a custom kernel, over the problems of specs.py: the
operation rewritten in other PyTorch ops, in a torch.jit.script function, in a
torch.jit.trace of one, or (slow) one batch row at a time. The `Base` heads (HEAD, L2_HEAD)
hold the reference's attributes; kernel_candidates.py builds on them too.
"""

from __future__ import annotations

import re

HEAD = '''import torch
import torch.nn as nn

P_DEFAULT = {p!r}


class Base(nn.Module):
    def __init__(self, *init):
        super().__init__()
        self.p = float(init[0]) if init else P_DEFAULT
'''

TORCH = HEAD + '''

class ModelNew(Base):
    def forward(self, x):
        return {expr}
'''

SLOW = HEAD + '''

class ModelNew(Base):
    def forward(self, x):
        # one small launch per row: correct, and slow
        rows = x.reshape(x.shape[0], -1)
        out = torch.empty_like(rows)
        for i in range(rows.shape[0]):
            r = rows[i]
            out[i] = {row_expr}
        return out.reshape(x.shape)
'''

SOFTMAX = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *init):
        super().__init__()
        self.dim = int(init[0]) if init else 1

    def forward(self, x):
        shifted = x - x.amax(dim=self.dim, keepdim=True)
        {body}
'''


L2_HEAD = """import torch
import torch.nn as nn
import torch.nn.functional as F
{imports}

class Base(nn.Module):
    def __init__(self, {args}):
        super().__init__()
{layers}
"""

L2_TORCH = L2_HEAD + """

class ModelNew(Base):
    def forward(self, x):
        y = {op}
{body}
        return y
"""

L2_SLOW = L2_HEAD + """

class ModelNew(Base):
    def forward(self, x):
        y = {op}
        out = torch.empty_like(y)
        for i in range(y.shape[0]):  # the tail one batch row at a time: correct, and slow
            r = y[i]
{row_body}
            out[i] = r
        return out
"""

SCRIPT = HEAD + '''

@torch.jit.script
def _op(x: torch.Tensor, p: float) -> torch.Tensor:
    return {expr}


class ModelNew(Base):
    def forward(self, x):
        return _op(x, self.p)
'''

TRACE = HEAD + '''

class ModelNew(Base):
    def __init__(self, *init):
        super().__init__(*init)
        p = self.p

        def op(x):
            return {expr}

        self._op = torch.jit.trace(op, torch.rand(64) - 0.5)  # traced once, on the CPU

    def forward(self, x):
        return self._op(x)
'''

L2_SCRIPT = L2_HEAD + """

@torch.jit.script
def _tail(y: torch.Tensor{params}) -> torch.Tensor:
{body}
    return y


class ModelNew(Base):
    def forward(self, x):
        return _tail({op}{call_args})
"""


def _lines(stmts: list[str], indent: int) -> str:
    return "\n".join(" " * indent + s for s in stmts)


def l1_torch(kind: str, torch_expr: str, p: float) -> str:
    """kind: torch | script | trace | slow, over an OPS entry's PyTorch expression."""
    if kind == "slow":
        return SLOW.format(row_expr=re.sub(r"\bx\b", "r", torch_expr), p=p)
    expr = torch_expr if kind == "torch" else torch_expr.replace("self.p", "p")
    return {"torch": TORCH, "script": SCRIPT, "trace": TRACE}[kind].format(expr=expr, p=p)


def l2_head(spec: dict) -> dict:
    return {"args": spec["args"], "layers": _lines(spec["layers"], 8), "op": spec["op"]}


def l2_torch(kind: str, spec: dict) -> str:
    """kind: torch | script | slow, over an L2 spec's PyTorch tail."""
    head = l2_head(spec)
    if kind == "slow":
        rows = [re.sub(r"\by\b", "r", s) for s in spec["torch"]]
        return L2_SLOW.format(row_body=_lines(rows, 12), imports="", **head)
    if kind == "torch":
        return L2_TORCH.format(body=_lines(spec["torch"], 8), imports="", **head)
    names = {v: k for k, v in spec["scalars"].items()}
    body = []
    for stmt in spec["torch"]:
        for value, name in names.items():
            stmt = stmt.replace(value, name)
        body.append(re.sub(r"\bself\.(\w+)", r"\1", stmt))
    params = ("".join(f", {p}: torch.Tensor" for p in spec["chans"])
              + "".join(f", {s}: float" for s in spec["scalars"]))
    args = ("".join(f", self.{p}" for p in spec["chans"])
            + "".join(f", float({v})" for v in spec["scalars"].values()))
    return L2_SCRIPT.format(body=_lines(body, 4), params=params, call_args=args, imports="",
                            **head)
