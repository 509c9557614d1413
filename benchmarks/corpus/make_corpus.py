"""Writes the throughput corpus: 210 candidates over KernelBench levels 1-3 in the shapes
trained models write (issue 59), and `expected.json`, each file's expected verdict on a GPU.

    python benchmarks/corpus/make_corpus.py /tmp/kb_corpus [--source ../shared/kernelbench]
    python benchmarks/eval_throughput.py            # generates it and evaluates it

Counted over the files, as over 210 model-written ones: 72 use load_inline (38 at import,
29 in __init__, 7 in forward; two build at import and in __init__), 138 build no custom
kernel; 94 test torch.cuda.is_available(), 35 pass extra_cuda_cflags (24 with
--use_fast_math), 27 capture CUDA graphs, 24 use torch.jit.script or trace, 50 set
cudnn.benchmark, 24 switch allow_tf32 (18 on: the harness sees its numerics changed, so
incorrect), 8 call torch.compile. Among them slow ones (a launch per batch row), wrong
ones (a kernel that skips the last element, a layout bug, fp16 autocast, TF32) and
failing ones (a device trap, a compile error, a shape bug, out of memory).

Kernel candidates: kernel_candidates.py over specs.py's level-1 elementwise maps and
level-2 fused tails, a row softmax, a sum over dim 1 and the level-3 MLPs' ReLU. PyTorch
ones: torch_candidates.py (rewrites, jit) and derived.py (the problem's own network with
graphs, torch.compile, autocast...), read from --source at generation time. Expected
verdicts: correct | incorrect | error (compile_error, runtime_error, crashed, timeout,
oom), and `slow` where the candidate is slower than the reference by design.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

import cuda_sources as cu
import derived
import specs
import torch_candidates as tc
from kernel_candidates import KernelSpec, kernel_candidate

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO.parent / "shared" / "kernelbench", REPO / "shared" / "kernelbench",
           REPO.parents[1] / "shared" / "kernelbench"]  # main, the device, a worktree


@dataclass
class Candidate:
    level: int
    pid: int
    text: str
    verdict: str = "correct"
    why: str = ""
    slow: bool = False
    kind: str = ""
    cudnn: str | None = None  # "plain" | "guarded"
    tf32: bool | None = None


# ---- kernel candidates -------------------------------------------------------------
def _op_spec(pid: int, bad: str | None = None) -> KernelSpec:
    name, torch_expr, cuda_expr, _, p, _ = specs.OPS[pid]
    y_expr = re.sub(r"\bx\b", "y", torch_expr)
    return KernelSpec(1, pid, tc.HEAD.format(p=p), cu.map_source(f"l1p{pid}", cuda_expr, bad),
                      cu.DECL_MAP, "x", ["return self._kernel(x.contiguous())"], ", self.p",
                      [f"return {y_expr}"])


SUM_HEAD = """import torch
import torch.nn as nn


class Base(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
"""

GELU_TANH = ("0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))",
             "0.5 * y * (1.0 + torch.tanh(0.7978845608028654 * (y + 0.044715 * y * y * y)))")


def _extra_spec(pid: int) -> KernelSpec:
    """The level-1 kernels beside OPS: GELU (88), times a scalar (5), softmax (23), sum (47)."""
    if pid == 88:
        return KernelSpec(1, 88, tc.HEAD.format(p=0.0), cu.map_source("l1p88", GELU_TANH[0]),
                          cu.DECL_MAP, "x", ["return self._kernel(x.contiguous())"],
                          ", self.p", [f"return {GELU_TANH[1]}"])
    if pid == 5:
        return KernelSpec(1, 5, tc.HEAD.format(p=1.0), cu.map_source("l1p5", "v * p", None, 512),
                          cu.DECL_MAP, "A, s",
                          ["self.p = float(s)", "return self._kernel(A.contiguous())"],
                          ", self.p", ["return y * self.p"])
    if pid == 23:
        return KernelSpec(1, 23, tc.HEAD.format(p=0.0),
                          cu.SOFTMAX_SRC.format(tag="l1p23", threads=256), cu.DECL_ROWS, "x",
                          ["return self._kernel(x.contiguous())"], "",
                          ["return torch.softmax(y, dim=1)"])
    return KernelSpec(1, 47, SUM_HEAD, cu.SUM_DIM1_SRC.format(tag="l1p47", threads=256),
                      cu.DECL_ROWS, "x",
                      ["if self.dim != 1 or x.dim() != 3:",
                       "    return torch.sum(x, dim=self.dim, keepdim=True)",
                       "return self._kernel(x.contiguous())"], "",
                      ["return torch.sum(y, dim=1, keepdim=True)"])


def _tail_spec(pid: int, bad: str | None = None) -> KernelSpec:
    spec = specs.L2[pid]
    head = tc.L2_HEAD.format(imports="", **tc.l2_head(spec))
    run_args = ("".join(f", self.{p}" for p in spec["chans"])
                + "".join(f", float({v})" for v in spec["scalars"].values()))
    return KernelSpec(2, pid, head, cu.tail_source(f"l2p{pid}", spec, bad), cu.tail_decl(spec),
                      "x", [f"return self._kernel({spec['op']}.contiguous())"], run_args,
                      spec["torch"] + ["return y"])


def _mlp_spec(pid: int, source: Path) -> KernelSpec:
    net = derived.network_source(_problem_file(source, 3, pid))
    return KernelSpec(3, pid, net + "\n\nBase = _Net\n", cu.map_source(f"l3p{pid}", "fmaxf(v, 0.f)"),
                      cu.DECL_MAP, "x",
                      ["for layer in self.network:",
                       "    x = self._kernel(x.contiguous()) if isinstance(layer, nn.ReLU) "
                       "else layer(x)", "return x"], ", 0.0", ["return torch.relu(y)"])


BAD_KERNELS = [(1, 21, "wrong", "import"), (1, 29, "wrong", "init"), (1, 20, "crash", "init"),
               (1, 26, "compile", "import"), (2, 16, "wrong", "import")]
BAD_WHY = {"wrong": ("incorrect", "the kernel skips an element / a bug in the tail"),
           "crash": ("error", "a device trap"), "compile": ("error", "CUDA that does not compile")}


def kernel_plan(source: Path) -> list[tuple[KernelSpec, str, str, str]]:
    """(spec, place, bad kind or "", tag) for the 72 kernel candidates."""
    ops = list(specs.OPS)
    plan = [(_op_spec(p), "import", "", "a") for p in ops]
    plan += [(_op_spec(p), "init" if i < 8 else "import", "", "b") for i, p in enumerate(ops)]
    for pid in (88, 5, 23, 47):
        plan += [(_extra_spec(pid), "import", "", "a"), (_extra_spec(pid), "init", "", "b")]
    for pid in specs.L2:
        plan += [(_tail_spec(pid), "import", "", "a"), (_tail_spec(pid), "init", "", "b")]
    for pid in (1, 2, 3):
        plan += [(_mlp_spec(pid, source), "import", "", "a"), (_mlp_spec(pid, source), "init", "", "b")]
    plan += [(_op_spec(p), "forward", "", "c") for p in (19, 21, 25)]
    plan += [(_extra_spec(88), "forward", "", "c")]
    plan += [(_tail_spec(p), "forward", "", "c") for p in (12, 47, 76)]
    plan += [(_op_spec(p), "both", "", "d") for p in (22, 30)]
    for level, pid, bad, place in BAD_KERNELS:
        spec = _op_spec(pid, bad) if level == 1 else _tail_spec(pid, bad)
        plan.append((spec, place, bad, bad))
    return plan


def kernel_candidates(source: Path) -> list[Candidate]:
    plan = kernel_plan(source)
    # guards: 22 of the 27 __init__ builds, both doubles, 4 of 7 lazy ones, 12 at import
    quota = {"init": 22, "both": 2, "forward": 4, "import": 12}
    seen = {k: 0 for k in quota}
    flags = (["fast", "O3"] * 11 + ["fast"] * 13 + [None] * 37)[:len(plan)]
    out = []
    for i, (spec, place, bad, tag) in enumerate(plan):
        seen[place] += 1
        total = sum(1 for _, pl, _, _ in plan if pl == place)
        guard = bad != "compile" and _evenly(seen[place] - 1, total, quota[place])
        cflags = flags[(i * 7) % len(flags)]
        text = kernel_candidate(spec, f"kbc_l{spec.level}p{spec.pid}_{tag}", place, guard,
                                cflags)
        verdict, why = BAD_WHY[bad] if bad else ("correct", "")
        out.append(Candidate(spec.level, spec.pid, text, verdict, why,
                             kind=f"load_inline {place}{' guarded' if guard else ''}"))
    return out


def _evenly(i: int, total: int, n: int) -> bool:
    """Whether item i of `total` is one of n picked evenly."""
    return (i * n) // total != ((i + 1) * n) // total


def _problem_file(source: Path, level: int, pid: int) -> Path:
    found = sorted((source / f"level{level}").glob(f"{pid}_*.py"))
    if not found:
        raise SystemExit(f"make_corpus: {source} lacks level {level} problem {pid}")
    return found[0]


# ---- candidates without a custom kernel ----------------------------------------------
def torch_candidates() -> list[Candidate]:
    """The 55 hand-written PyTorch ones: rewrites, jit script / trace, slow row loops."""
    out = []
    for pid, (_, expr, _, _, p, _) in specs.OPS.items():
        out.append(Candidate(1, pid, tc.l1_torch("torch", expr, p), kind="rewrite"))
        out.append(Candidate(1, pid, tc.l1_torch("script", expr, p), kind="jit.script"))
        if pid in (19, 20, 21, 22, 28, 32):
            out.append(Candidate(1, pid, tc.l1_torch("trace", expr, p), kind="jit.trace"))
        if pid in (19, 22, 27, 30):
            out.append(Candidate(1, pid, tc.l1_torch("slow", expr, p), slow=True,
                                 why="a launch per row", kind="slow"))
    out.append(Candidate(1, 23, tc.SOFTMAX.format(
        body="e = shifted.exp()\n        return e / e.sum(dim=self.dim, keepdim=True)"),
        kind="rewrite"))
    out.append(Candidate(1, 24, tc.SOFTMAX.format(
        body="return shifted - shifted.exp().sum(dim=self.dim, keepdim=True).log()"),
        kind="rewrite"))
    for pid, spec in specs.L2.items():
        out.append(Candidate(2, pid, tc.l2_torch("torch", spec), kind="rewrite"))
        if pid in (1, 12, 57, 76, 81, 47):
            out.append(Candidate(2, pid, tc.l2_torch("script", spec), kind="jit.script"))
        if pid in (12, 76, 95):
            out.append(Candidate(2, pid, tc.l2_torch("slow", spec), slow=True,
                                 why="the tail a batch row at a time", kind="slow"))
    return out


# (level, problem ids) per derived.py wrapper: 83 candidates on the problems' own networks
DERIVED = {
    "graphs": {1: [1, 7, 9, 12, 40, 50, 54, 66], 2: [3, 6, 9, 14, 15, 18, 20, 28, 33],
               3: [1, 2, 3, 4, 8, 9, 11, 19, 31, 50]},
    "compile": {1: [40], 2: [1, 12, 76, 95], 3: [1, 4, 44]},
    "autocast": {1: [1], 2: [9], 3: [2, 43]},
    "rows": {1: [10], 3: [1, 31]},
    "flatten": {2: [4], 3: [4]},
    "workspace": {1: [50]},
    "plain": {1: [3, 6, 11, 14, 15, 33, 34, 35, 36, 41, 42, 44, 48, 53, 63],
              2: [2, 5, 7, 8, 10, 13, 17, 19, 21, 22],
              3: [5, 6, 13, 14, 17, 20, 25, 28, 35, 36, 39, 45, 47]},
}


def derived_candidates(source: Path) -> list[Candidate]:
    out = []
    for wrapper, levels in DERIVED.items():
        verdict, why = derived.EXPECTED.get(wrapper, ("correct", ""))
        for level, pids in levels.items():
            for i, pid in enumerate(pids):
                mode = "max-autotune-no-cudagraphs" if wrapper == "compile" and i % 2 else ""
                text = derived.derived_candidate(_problem_file(source, level, pid), wrapper, mode)
                out.append(Candidate(level, pid, text, verdict, why, slow=wrapper == "rows",
                                     kind=wrapper if wrapper != "rows" else "slow rows"))
    return out


# ---- backend switches ------------------------------------------------------------------
CUDNN = {"plain": "torch.backends.cudnn.benchmark = True\n",
         "guarded": "if torch.cuda.is_available():\n    torch.backends.cudnn.benchmark = True\n"}
TF32 = "torch.backends.cuda.matmul.allow_tf32 = {v}\ntorch.backends.cudnn.allow_tf32 = {v}\n"
GUARDS, CUDNN_N, TF32_ON, TF32_OFF = 94, 50, 18, 6


def switch_backends(cands: list[Candidate]) -> None:
    """cudnn.benchmark on 50 (10 kernel candidates of level 2, 40 PyTorch ones), guarded
    where the guards fall short of 94; allow_tf32 on 18 and off 6 of the correct PyTorch
    ones without CUDA graphs (graphs already replay whatever was captured)."""
    kernel_l2 = [c for c in cands if c.kind.startswith("load_inline") and c.level == 2]
    no_kernel = [c for c in cands if not c.kind.startswith("load_inline")]
    conv_first = sorted(no_kernel, key=lambda c: (c.level == 1, c.kind != "plain"))
    chosen = _pick(kernel_l2, 10) + _pick(conv_first, CUDNN_N - 10)
    missing = GUARDS - sum("torch.cuda.is_available()" in c.text for c in cands)
    open_ = [c for c in chosen if "torch.cuda.is_available()" not in c.text]
    guarded = set(map(id, _pick(open_, missing)))
    for c in chosen:
        c.cudnn = "guarded" if id(c) in guarded else "plain"
    plain = [c for c in no_kernel if c.verdict == "correct" and c.kind in ("plain", "compile",
                                                                            "rewrite")]
    for i, c in enumerate(_pick(plain, TF32_ON + TF32_OFF)):
        c.tf32 = i % 4 != 3
        if c.tf32:
            c.verdict, c.why = "incorrect", "allow_tf32 switched on: numerics changed"


def _pick(items: list, n: int) -> list:
    if n > len(items):
        raise SystemExit(f"make_corpus: {n} wanted of {len(items)}")
    return [c for i, c in enumerate(items) if _evenly(i, len(items), n)]


def render(c: Candidate) -> str:
    head = ""
    if c.cudnn or c.tf32 is not None:
        head = "import torch\n" + (CUDNN[c.cudnn] if c.cudnn else "")
        head += TF32.format(v=c.tf32) if c.tf32 is not None else ""
        head += "\n"
    return "\n".join(ln.rstrip() for ln in (head + c.text).splitlines()) + "\n"


def build(source: Path) -> dict[str, tuple[str, dict]]:
    """file name -> (text, its expected verdict entry)."""
    cands = kernel_candidates(source) + torch_candidates() + derived_candidates(source)
    switch_backends(cands)
    samples: dict[tuple[int, int], int] = {}
    files = {}
    for c in cands:
        s = samples[(c.level, c.pid)] = samples.get((c.level, c.pid), -1) + 1
        entry = {"verdict": c.verdict, "slow": c.slow, "kind": c.kind}
        if c.why:
            entry["why"] = c.why
        files[f"level{c.level}_problem{c.pid}_sample{s}.py"] = (render(c), entry)
    return files


def default_source() -> Path:
    return next((s for s in SOURCES if s.is_dir()), SOURCES[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="the folder to write the candidates to")
    p.add_argument("--source", type=Path, default=default_source(),
                   help="KernelBench problems (level1..3 folders)")
    args = p.parse_args()
    if not (args.source / "level3").is_dir():
        raise SystemExit(f"make_corpus: {args.source} holds no level1..3 problem folders")
    files = build(args.source)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("level*_problem*_sample*.py"):
        old.unlink()
    for name, (text, _) in files.items():
        (args.out / name).write_text(text)
    expected = {name: entry for name, (_, entry) in files.items()}
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {len(files)} candidates and expected.json to {args.out}")


if __name__ == "__main__":
    main()
