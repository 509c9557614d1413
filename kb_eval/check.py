"""python -m kb_eval.check: find problems that a constant answer would pass.

A check only catches a wrong answer if the right one changes with the inputs. This runs
each reference (in a child) on several independently seeded inputs and reports, per
output tensor:

  constant            every element equal, for every seed (std ~ 0)
  input_independent   identical output for every seed
  tolerance_blind     differs across seeds by less than the correctness tolerance
  all_zero            zero everywhere, for every seed
  zeros_pass          all zeros would pass the tolerance check for every seed
  nonfinite           NaN or Inf somewhere (the comparison only checks their positions)

It prints a table and exits 1 if any problem is flagged (or its reference fails).
"""

from __future__ import annotations

import secrets
import sys
import tempfile
from pathlib import Path

from kb_eval.cli import (Parser, add_execution_flags, add_precision_flag,
                         add_selection_flags, check_gpus_visible, execution_config, run_cli,
                         writable_dir)
from kb_eval.errors import UserError
from kb_eval.isolation import run_isolated
from kb_eval.problems import Problem, load_problems

TASK = "kb_eval.check:probe_reference"
FLAGS = ("constant", "input_independent", "tolerance_blind", "all_zero", "zeros_pass",
         "nonfinite")


# ------------------------------------------------------------------ child side
def probe_reference(payload: dict, workdir: Path) -> dict:
    """Run the reference on `seeds` independently seeded inputs; describe its outputs."""
    import torch

    from kb_eval.harness import inputs_for, load_problem, pick_device, reference_model
    from kb_eval.inputs import TOLERANCES

    device = pick_device(payload.get("device"))
    precision = payload["precision"]
    atol, rtol = TOLERANCES[precision]
    module, init = load_problem(payload["code"], precision, device)
    model = reference_model(module, init, precision, device)
    runs: list[list[torch.Tensor]] = []
    for k in range(payload["seeds"]):
        inputs = inputs_for(module, payload["secret"], ("check", k), precision, device)
        with torch.no_grad():
            out = model(*inputs)
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        if not all(isinstance(t, torch.Tensor) for t in items):
            raise TypeError("the reference returns something other than tensors")
        runs.append([t.detach().to("cpu", torch.float64) for t in items])
    return {"outputs": [_describe([r[i] for r in runs], atol, rtol)
                        for i in range(len(runs[0]))]}


def _close(a, b, atol: float, rtol: float) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def _describe(per_seed: list, atol: float, rtol: float) -> dict:
    """What one output tensor looks like across the seeds."""
    import torch

    first = per_seed[0]
    finite = [t[t.isfinite()] for t in per_seed]
    stds = [float(f.std()) if f.numel() > 1 else None for f in finite]
    spread = max((float((t - first).abs().nan_to_num(0.0).max()) if t.shape == first.shape
                  and t.numel() else 0.0) for t in per_seed)
    flags = []
    if first.numel() > 1 and all(s is not None and s <= 1e-12 * max(1.0, float(f.abs().max()))
                                 for s, f in zip(stds, finite)):
        flags.append("constant")
    if all(t.shape == first.shape and torch.equal(t.nan_to_num(0.0), first.nan_to_num(0.0))
           for t in per_seed[1:]):
        flags.append("input_independent")
    elif all(_close(t, first, atol, rtol) for t in per_seed[1:]):
        flags.append("tolerance_blind")
    if all(t.numel() and not t.nan_to_num(1.0).any() for t in per_seed):
        flags.append("all_zero")
    elif all(_close(torch.zeros_like(t), t, atol, rtol) for t in per_seed):
        flags.append("zeros_pass")
    if any(not bool(t.isfinite().all()) for t in per_seed):
        flags.append("nonfinite")
    return {"shape": list(first.shape), "std": min((s for s in stds if s is not None),
                                                   default=None),
            "spread": spread, "flags": flags}


# ------------------------------------------------------------------ parent side
def check_problem(problem: Problem, *, precision: str, seeds: int, device: str,
                  timeout_s: float, mem_limit_mb: int | None, workdir: Path) -> dict:
    """One row of the report: the problem's outputs and flags, or its error."""
    env = {"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}
    payload = {"code": problem.code, "precision": precision, "seeds": seeds,
               "secret": secrets.randbits(63), "device": device}
    out = run_isolated(TASK, payload, workdir=workdir / problem.slug, timeout_s=timeout_s,
                       mem_limit_mb=mem_limit_mb, env=env, prewarm=True)
    if not out.ok:
        return {"key": problem.key, "name": problem.name, "error": out.describe()}
    outputs = out.result["outputs"]
    flags = [f"{'' if len(outputs) == 1 else f'out{i}:'}{f}"
             for i, o in enumerate(outputs) for f in o["flags"]]
    return {"key": problem.key, "name": problem.name, "outputs": outputs, "flags": flags}


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def format_table(rows: list[dict]) -> str:
    head = ("problem", "name", "output shape(s)", "min std", "seed spread", "verdict")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append((r["key"], r["name"], "-", "-", "-", f"ERROR {r['error']}"))
            continue
        outs = r["outputs"]
        lines.append((r["key"], r["name"][:28], " ".join("x".join(map(str, o["shape"])) or "()"
                                                         for o in outs),
                      " ".join(_fmt(o["std"]) for o in outs),
                      " ".join(_fmt(o["spread"]) for o in outs),
                      ("FLAGGED " + ", ".join(r["flags"])) if r["flags"] else "ok"))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
                     for row in lines)


def parser(defaults) -> Parser:
    p = Parser(prog="python -m kb_eval.check",
               description="Flag problems whose reference output is constant, independent "
                           "of the inputs, within tolerance of constant, all zero or NaN: "
                           "a constant answer would pass them. Each reference runs in a "
                           "child on several independently seeded inputs. Exit 1 if any "
                           "problem is flagged.")
    add_selection_flags(p, defaults.source)
    add_precision_flag(p, defaults.precision)
    p.add_argument("--seeds", type=int, default=4,
                   help="independently seeded input sets per problem (default: 4)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the references run (default: cpu; outputs do not depend on it)")
    p.add_argument("--timeout", type=float, default=defaults.run_timeout_s,
                   help=f"seconds per problem (default: {defaults.run_timeout_s:g})")
    h = p.add_argument_group("--harness: the reference as its own candidate, through the real eval")
    h.add_argument("--harness", action="store_true",
                   help="evaluate each problem's reference as the candidate (build, child, "
                        "reference server, live baseline) and report whether it is judged "
                        "correct, its memory, determinism, speedup (~1.0) and wall time; "
                        "exit 1 if any problem cannot be judged here. Run it first on a new "
                        "problem set or GPU")
    h.add_argument("--backend", choices=["auto", "cuda", "cpp"], default="auto",
                   help="where the copies run: cuda (GPU) or cpp (CPU); auto: cuda with a "
                        "GPU (default: auto)")
    h.add_argument("--trials", type=int, default=None,
                   help=f"timed calls per copy; correctness trials: DEFAULTS correct_trials "
                        f"(default: {defaults.trials} on GPU, {defaults.cpu_trials} on CPU)")
    h.add_argument("--out", type=Path, default=None,
                   help="the JSON report (default: <results-dir>/check/<hardware>/"
                        "harness_<source>_<precision>.json)")
    h.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                   help=f"where results live (default: {defaults.results_dir})")
    add_execution_flags(p)
    return p


def harness_main(args, d) -> int:
    import torch

    from kb_eval.eval.config import EvalConfig
    from kb_eval.selfcheck import run_harness_check
    from kb_eval.timing import TimingSettings

    problems = load_problems(args.source, args.level, args.problems, args.name)
    backend = args.backend if args.backend != "auto" else (
        "cuda" if torch.cuda.is_available() else "cpp")
    cpu = backend == "cpp"
    if args.trials is not None and args.trials < 1:
        raise UserError(f"--trials must be at least 1 (got {args.trials})")
    timing = TimingSettings(warmup=d.cpu_warmup if cpu else d.warmup,
                            trials=args.trials or (d.cpu_trials if cpu else d.trials),
                            budget_ms=d.timing_budget_ms)
    config = EvalConfig(backend=backend, precision=args.precision, timing=timing,
                        correct_trials=d.correct_trials, live_baseline=True,
                        results_dir=args.results_dir, **execution_config(args, d, cpu))
    return run_harness_check(problems, config, args.out, args.source)


def main(argv: list[str] | None = None) -> int:
    from kb_eval.settings import load_settings

    d = load_settings().defaults
    args = parser(d).parse_args(argv)
    check_gpus_visible(args.gpus)
    if args.harness:
        if args.out is not None:
            if args.out.is_dir():
                raise UserError(f"--out {args.out} is a folder: name a .json file")
            writable_dir(args.out.parent, "--out", given=args.out)
        else:
            writable_dir(args.results_dir, "--results-dir")
        return harness_main(args, d)
    if args.seeds < 2:
        raise UserError(f"--seeds must be at least 2 to compare seeds (got {args.seeds})")
    problems = load_problems(args.source, args.level, args.problems, args.name)
    with tempfile.TemporaryDirectory(prefix="kb_check_") as tmp:
        rows = [check_problem(p, precision=args.precision, seeds=args.seeds,
                              device=args.device, timeout_s=args.timeout,
                              mem_limit_mb=d.mem_limit_mb, workdir=Path(tmp))
                for p in problems]
    print(format_table(rows))
    bad = [r for r in rows if r.get("flags") or "error" in r]
    print(f"\n{len(bad)} of {len(rows)} problem(s) flagged" if bad else
          f"\nall {len(rows)} problem(s) ok: their outputs depend on their inputs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
