"""Our hand-written solutions against PyTorch, per problem and precision: the CUDA ones on
the GPU, or (`--backend cpp`) the C++ ones on the CPU.

For each bundled problem that reference_kernels/solutions/<backend>/index.json answers (the
indexed file and every `<name>__<variant>.py` beside it): max |error| against a float64
run of the reference on the same (rounded) weights and inputs, and whether the eval's rule
(|out - ref| <= atol + rtol |ref| against the reference at the run's precision, TF32 off)
holds; median time through kb_eval.timing (CUDA events, a 2x-L2 buffer zeroed before every
call, warmup, then trials; repeated in rounds that interleave all callables, the median of
the round medians reported with their spread) of each variant, PyTorch eager and torch.compile (default mode);
speedups, from the medians and paired (eager / ours within each round: median and range); CUDA launches per forward (torch.profiler, device-side events); for the Linear
problems our GEMM as % of cuBLAS at the same precision (fp32: TF32 off, the fair one; and
TF32 on, for information). Solutions build first, in parallel child processes. On the CPU
the timer is the host clock, nothing is pinned (the solutions use torch's threads) and
launches are not counted.

    python benchmarks/reference_kernels.py [--backend cuda|cpp] [--problems bert/level2/1,bert/level2/2]
        [--solutions DIR] [--precisions fp32,bf16] [--warmup 10] [--trials 50] [--rounds 3] [--no-compile] [--no-pin]
        [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kb_eval.inputs import (TOLERANCES, build_model, make_init_inputs, make_inputs,  # noqa: E402
                            precision_dtype, set_precision_flags)
from kb_eval.eval.schedule import pinning  # noqa: E402
from kb_eval.problems import load_folder, load_module, load_problems  # noqa: E402
from kb_eval.solutions import files_of  # noqa: E402
from kb_eval.timing import TimingSettings, time_callable  # noqa: E402

SOLUTIONS_ROOT = REPO / "reference_kernels" / "solutions"
SOLUTIONS = SOLUTIONS_ROOT / "cuda"  # set by main() from --backend
SEED = 20240613


def suite_problems(suite: str) -> list:
    """The bundled suite, or KB_PROBLEMS_DIR/<suite> (a KernelBench-layout copy) when set."""
    root = os.environ.get("KB_PROBLEMS_DIR")
    return load_folder(Path(root) / suite, suite) if root else load_problems(suite)


def solution_files(entry: str | dict) -> list[str]:
    """The indexed file(s) and their variants (`<stem>__*.py`), the fp32 pick first."""
    primary = files_of(entry)[0]
    stem = primary.removesuffix(".py").split("__")[0]
    files = [f"{stem}.py"] + sorted(p.name for p in SOLUTIONS.glob(f"{stem}__*.py"))
    return [primary] + [f for f in files if f != primary and (SOLUTIONS / f).exists()]


_loaded: dict[str, object] = {}


def load_solution(name: str):
    """Exec a solution file once per process (its load_inline builds or loads the extension)."""
    if name not in _loaded:
        _loaded[name] = load_module((SOLUTIONS / name).read_text(), f"kb_sol_{name.removesuffix('.py')}")
    return _loaded[name]


def _build_one(path: Path) -> tuple[str, float, str | None]:
    global SOLUTIONS
    SOLUTIONS, name, t0 = path.parent, path.name, time.monotonic()  # a spawned child's own copy
    try:
        load_solution(name)
        return name, time.monotonic() - t0, None
    except Exception:  # noqa: BLE001 - reported in the table, the run goes on
        return name, time.monotonic() - t0, traceback.format_exc(limit=3)


def build_all(names: list[str]) -> dict[str, str | None]:
    """Compile every solution in its own child (load_inline caches the build on disk)."""
    errors = {}
    workers = min(len(names), os.cpu_count() or 1)
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for name, secs, err in pool.map(_build_one, [SOLUTIONS / n for n in names]):
            print(f"  built {name:45s} {secs:6.1f} s {'FAILED' if err else ''}", flush=True)
            errors[name] = err
    return errors


def count_launches(fn, device: torch.device) -> int | None:
    """Device-side activities (kernels, memcpy, memset) of one call (None on the CPU)."""
    if device.type != "cuda":
        return None
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def judge(out: torch.Tensor, ref_same: torch.Tensor, ref64: torch.Tensor, precision: str) -> dict:
    atol, rtol = TOLERANCES[precision]
    o, r = out.double(), ref_same.double()
    ok = bool(torch.isfinite(o).all()) and bool(((o - r).abs() <= atol + rtol * r.abs()).all())
    return {"ok": ok, "err64": float((o - ref64).abs().max()), "err_ref": float((o - r).abs().max())}


_spin: list[torch.Tensor] = []


def spin_up_gpu() -> None:
    """~15 ms of matrix work first: after a build or a torch.compile the GPU sat idle and its
    clock dropped, which once made the first timed solution of a case 25% slow."""
    if not torch.cuda.is_available():
        return
    if not _spin:
        _spin.append(torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16))
    for _ in range(80):
        _spin[0] @ _spin[0]
    torch.cuda.synchronize()


def time_ms(fn, args) -> float:
    spin_up_gpu()
    settings = TimingSettings(warmup=args.warmup, trials=args.trials)
    return time_callable(fn, settings, args.device).median


def bench_case(problem, files: list[str], precision: str, args, build_errors) -> list[dict]:
    """One problem at one precision: reference rows first, then one row per solution file."""
    dev, dtype = torch.device(args.device), precision_dtype(precision)
    set_precision_flags(precision)
    mod = load_module(problem.code, f"kb_prob_{problem.problem_id}_{problem.level}")
    init = make_init_inputs(mod.get_init_inputs, dev)
    ref = build_model(mod.Model, init, SEED, dev, dtype)
    state = ref.state_dict()
    inputs = make_inputs(mod.get_inputs, SEED + 1, dev, dtype)
    ref64 = copy.deepcopy(ref).double()
    ref_out = ref(*inputs)
    ref64_out = ref64(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs])
    del ref64
    rows, timed = [], []  # timed: (row, fn, tf32) for the interleaved timing rounds
    base = {"problem": problem.key, "name": problem.name, "precision": precision}

    def check(label: str, fn, tf32: bool = False) -> dict:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        out = fn()
        row = {**base, "solution": label, **judge(out, ref_out, ref64_out, precision)}
        row["launches"] = count_launches(fn, dev)
        set_precision_flags(precision)
        timed.append((row, fn, tf32))
        rows.append(row)
        return row

    eager = check("eager", lambda: ref(*inputs))
    if files and files[0] == "gemm.py" and precision == "fp32":  # cuBLAS with TF32 on, for information
        check("eager_tf32", lambda: ref(*inputs), tf32=True)["ok"] = None
    if not args.no_compile:
        try:
            compiled = torch.compile(ref)
            check("torch.compile", lambda: compiled(*inputs))
        except Exception as e:  # noqa: BLE001
            rows.append({**base, "solution": "torch.compile", "error": f"{type(e).__name__}: {e}"[:200]})
    models = {}
    for name in files:
        if build_errors.get(name):
            rows.append({**base, "solution": name, "error": "build failed"})
            continue
        try:
            models[name] = build_model(load_solution(name).ModelNew, init, SEED, dev, dtype, reference_state=state)
            check(name, lambda m=models[name]: m(*inputs))
        except Exception as e:  # noqa: BLE001
            rows.append({**base, "solution": name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        if dev.type == "cuda":
            torch.cuda.synchronize()
    # Rounds interleave all callables, so a slow GPU phase (clock or power) hits each alike;
    # a row's time is the median of its round medians, its spread the min and max of those.
    per_round = {id(row): [] for row, _, _ in timed}
    for _ in range(args.rounds):
        for row, fn, tf32 in timed:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            per_round[id(row)].append(time_ms(fn, args))
            set_precision_flags(precision)
    for row, _, _ in timed:
        ms = per_round[id(row)]
        row["rounds_ms"] = ms
        row["ms"], row["ms_min"], row["ms_max"] = statistics.median(ms), min(ms), max(ms)
    for r in rows:
        if "ms" in r:
            r["x_eager"] = eager["ms"] / r["ms"]
            r["x_eager_paired"] = paired_ratio(eager["rounds_ms"], r["rounds_ms"])
            r["launches_eager"] = eager["launches"]
    comp = next((r for r in rows if r["solution"] == "torch.compile" and "ms" in r), None)
    tf32 = next((r for r in rows if r["solution"] == "eager_tf32"), None)
    for r in rows:
        if "ms" in r and r["solution"].endswith(".py"):
            if comp:
                r["x_compile"] = comp["ms"] / r["ms"]
            if r["solution"] == "gemm.py":
                r["pct_cublas"] = 100 * eager["ms"] / r["ms"]
                if tf32:
                    r["pct_cublas_tf32"] = 100 * tf32["ms"] / r["ms"]
    return rows


def paired_ratio(base_ms: list[float], ms: list[float]) -> dict:
    """eager / ours round by round (a round times every callable of the case back to back,
    so a slow phase of the machine hits both sides of a round's ratio alike): the median
    of those ratios and their range. On a noisy H100, B64xS64 attention bf16 came out
    1.21x from the medians with eager's rounds spread 162 % and ours 132 %."""
    ratios = [b / m for b, m in zip(base_ms, ms)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def spread(r: dict) -> str:
    """(max - min) of the round medians, in % of the reported median."""
    return f"{100 * (r['ms_max'] - r['ms_min']) / r['ms']:.0f}"


def paired(p: dict | None) -> str:
    return "-" if p is None else f"{p['median']:.2f} [{p['min']:.2f}-{p['max']:.2f}]"


def pct(v, width: int) -> str:
    return f"{'-' if v is None else f'{v:.0f}%':>{width}s}"


def print_table(rows: list[dict]) -> str:
    head = (f"{'problem':14s} {'name':26s} {'prec':4s} {'solution':40s} {'ms':>8s} {'x eager':>7s} "
            f"{'spread %':>8s} {'paired [range]':>17s} {'x comp':>6s} {'launch':>6s} {'err vs fp64':>11s} {'ok':>3s} {'%cuBLAS':>7s} {'%tf32':>6s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['problem']:14s} {r['name'][:26]:26s} {r['precision']:4s} {r['solution']:40s} "
                         f"ERROR {r['error'][:120]}")
            continue
        ok = {True: "yes", False: "NO", None: "-"}[r.get("ok")]
        lines.append(
            f"{r['problem']:14s} {r['name'][:26]:26s} {r['precision']:4s} {r['solution']:40s} {r['ms']:8.4f} "
            f"{fmt(r.get('x_eager'), '7.2f')} {spread(r):>8s} {paired(r.get('x_eager_paired')):>17s} "
            f"{fmt(r.get('x_compile'), '6.2f')} {fmt(r['launches'], '6d'):>6s} "
            f"{r['err64']:11.2e} {ok:>3s} {pct(r.get('pct_cublas'), 7)} {pct(r.get('pct_cublas_tf32'), 6)}")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("cuda", "cpp"), default="cuda",
                   help="cuda: solutions/cuda on the GPU; cpp: solutions/cpp on the CPU")
    p.add_argument("--solutions", type=Path, default=None,
                   help="the solutions folder (default: reference_kernels/solutions/<backend>); a copy "
                        "holding `<stem>__<variant>.py` files times them beside the indexed ones")
    p.add_argument("--problems", default="", help="comma-separated keys (default: all in index.json)")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per callable")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--out", default="", help="folder for results.json and table.txt")
    p.add_argument("--no-pin", action="store_true",
                   help="leave the timing thread unpinned (default: pinned to one core after the builds, "
                        "as the eval pins its timing steps: these forwards are paced by the host)")
    args = p.parse_args()
    global SOLUTIONS
    SOLUTIONS = args.solutions or SOLUTIONS_ROOT / args.backend
    args.device = "cuda" if args.backend == "cuda" else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("reference_kernels.py --backend cuda needs a CUDA GPU")
    index = json.loads((SOLUTIONS / "index.json").read_text())
    wanted = [k for k in args.problems.split(",") if k] or list(index)
    unknown = [k for k in wanted if k not in index]
    if unknown:
        sys.exit(f"not in index.json: {unknown}")
    problems = {p.key: p for p in suite_problems(wanted[0].split("/")[0])}
    names = sorted({f for k in wanted for f in solution_files(index[k])})
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{where}  torch {torch.__version__}  building {len(names)} solutions", flush=True)
    build_errors = build_all(names)
    for n, e in build_errors.items():
        if e:
            print(f"--- build of {n} failed:\n{e}", flush=True)
    core = None if args.no_pin or args.device != "cuda" else pinning.timing_core("0")
    if core is not None and pinning.pin(0, core) is not None:
        print(f"  timing from core {core}", flush=True)
    rows = []
    for key in wanted:
        for precision in args.precisions.split(","):
            t0 = time.monotonic()
            with torch.no_grad():
                rows += bench_case(problems[key], solution_files(index[key]), precision, args, build_errors)
            print(f"  {key} {precision} done in {time.monotonic() - t0:.1f} s", flush=True)
    text = print_table(rows)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(rows, indent=1))
        (out / "table.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
