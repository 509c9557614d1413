"""python -m kb_eval.baseline: time the PyTorch reference of every selected problem.

Writes results/baseline/<gpu-slug>/<source>/<precision>[_<mode>].json (cpu as the slug
without a GPU), where kb_eval.eval and kb_eval.run look for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from kb_eval.baseline.stage import BaselineJob, ensure_peaks, run_baseline
from kb_eval.cli import (COMPILE_MODES, TVM_BASELINES, Parser, add_count_flag,
                         add_precision_flag, add_quiet_flag, add_results_dir_flag,
                         add_selection_flags, check_gpus_visible, run_cli, writable_dir)
from kb_eval.compilers.flags import add_tvm_flags, baseline_mode_of
from kb_eval.errors import UserError
from kb_eval.host_state import HOST_PACED
from kb_eval.peaks import peaks_path
from kb_eval.problems import load_problems
from kb_eval.settings import load_settings
from kb_eval.timing import TimingSettings, method_for

# How long a launch-heavy problem may be timed again, each time once the host runs at
# its full pace, until two timings agree (host_state.py, docs/PERFORMANCE.md).
HOST_WAIT_S = 30.0


def parser(defaults) -> Parser:
    p = Parser(prog="python -m kb_eval.baseline",
               description="Time the PyTorch reference of every selected problem with the "
                           "shared timing module (CUDA events, L2 flushed, fresh inputs per "
                           "call), each problem in its own child process.")
    add_selection_flags(p, defaults.source)
    add_precision_flag(p, defaults.precision)
    p.add_argument("--compile", dest="compile_mode", default=None,
                   choices=[*COMPILE_MODES, *TVM_BASELINES],
                   help="time torch.compile(model, mode=...) instead of eager, or 'tvm': "
                        "the reference exported with torch.export and built by Apache TVM "
                        "for the device's architecture (sm_XX); 'tvm-noarch': for the generic "
                        "sm_50 instead (no tensor cores), to measure what the architecture "
                        "is worth")
    add_tvm_flags(p)
    add_count_flag(p, "--trials", "timed calls (untimed calls before them: DEFAULTS warmup, "
                   "cpu_warmup)", defaults.trials, defaults.cpu_trials)
    on_gpu = defaults.baseline_visits
    p.add_argument("--visits", type=int, default=None,
                   help="children each problem is timed in, one per sweep over the problems, "
                        "the trials split between them, so that its calls are spread over "
                        f"the run (default: {on_gpu}" + ("" if on_gpu == 1 else
                                                        " on GPU, 1 on CPU") + ")")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="where to time (default: cuda if a GPU is visible, else cpu)")
    p.add_argument("--gpus", default=None,
                   help="GPU indices to spread problems over, e.g. 0,1 (default: all visible)")
    p.add_argument("--timeout", type=float, default=defaults.run_timeout_s,
                   help=f"seconds per problem before its child is killed "
                        f"(default: {defaults.run_timeout_s:g})")
    add_results_dir_flag(p, defaults.results_dir, "root of result files; the file is "
                         "<results-dir>/baseline/<hardware>/<source>/<precision>.json")
    p.add_argument("--output", default=None, help="write this file instead of the default path")
    p.add_argument("--resume", action="store_true",
                   help="skip problems already recorded in the file")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume, time again the problems recorded as failed")
    p.add_argument("--force", action="store_true",
                   help="replace an existing file made with other settings")
    p.add_argument("--peaks", action="store_true",
                   help="measure this machine's peaks (DRAM bandwidth; matmul rate at fp32 "
                        "with TF32 off, TF32, bf16, fp16) into <results-dir>/baseline/"
                        "<hardware>/peaks.json and stop (a baseline run measures them "
                        "once when that file is missing)")
    add_quiet_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    settings = load_settings()
    d = settings.defaults
    args = parser(d).parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda asked for, but torch sees no CUDA GPU")
    check_gpus_visible(args.gpus)
    if args.gpus and device == "cpu":
        raise UserError(f"--gpus {args.gpus} with --device cpu: GPUs are not used on the CPU")
    gpus = _parse_gpus(args.gpus) if device == "cuda" else []
    for flag, value in (("--trials", args.trials), ("--visits", args.visits)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1 (got {value})")
    output = Path(args.output).expanduser() if args.output else None
    if output is not None:
        if output.is_dir():
            raise UserError(f"--output {output} is a folder: name a .json file")
        writable_dir(output.parent, "--output", given=output)
    else:
        writable_dir(args.results_dir, "--results-dir")
    if args.peaks:
        return _measure_peaks(Path(args.results_dir).expanduser(), device, gpus)
    problems = load_problems(args.source, args.level, args.problems, args.name)
    trials = args.trials or (d.trials if device == "cuda" else d.cpu_trials)
    warmup = d.warmup if device == "cuda" else d.cpu_warmup
    visits = args.visits or (d.baseline_visits if device == "cuda" else 1)
    if visits > trials:
        raise UserError(f"--visits {visits} is more than --trials {trials}: each visit "
                        f"times at least one call")
    timing = TimingSettings(warmup=warmup, trials=trials)
    timing.method = method_for(device, timing.flush_l2, timing.launch_cover_ms)
    job = BaselineJob(problems=problems, precision=args.precision,
                      mode=baseline_mode_of(args, d.cache_dir),
                      timing=timing, results_dir=Path(args.results_dir).expanduser(),
                      device=device, gpus=gpus, timeout_s=args.timeout,
                      mem_limit_mb=d.mem_limit_mb, visits=visits,
                      host_wait_s=HOST_WAIT_S, resume=args.resume,
                      retry_failed=args.retry_failed, force=args.force, output=output)
    path, data = run_baseline(job, progress=not args.quiet)
    _print_summary(path, data, [p.key for p in problems])
    return 0


def _measure_peaks(results_dir: Path, device: str, gpus: list[int]) -> int:
    peaks = ensure_peaks(results_dir, device, gpus[0] if gpus else None, again=True)
    rates = ", ".join(f"{k} {v / 1e12:.3g}" for k, v in peaks.matmul_flops_per_s.items())
    bw = peaks.bandwidth
    print(f"{peaks.hardware.name}: bandwidth {bw / 1e9:.4g} GB/s (copy "
          f"{(peaks.copy_bytes_per_s or 0) / 1e9:.4g}, read "
          f"{(peaks.read_bytes_per_s or 0) / 1e9:.4g}); matmul TFLOP/s: {rates or '-'}"
          if bw else f"{peaks.hardware.name}: no bandwidth measured")
    for name, why in peaks.errors.items():
        print(f"note: {name}: {why}")
    print(f"-> {peaks_path(results_dir, peaks.hardware.slug)}")
    return 0


def _parse_gpus(spec: str | None) -> list[int]:
    count = torch.cuda.device_count()
    if not spec:
        return list(range(count))
    try:
        gpus = [int(x) for x in spec.split(",")]
    except ValueError:
        raise UserError(f"--gpus {spec!r}: use indices like 0,1") from None
    bad = [g for g in gpus if not 0 <= g < count]
    if bad:
        raise UserError(f"--gpus: no GPU {bad} (this machine has {count})")
    return gpus


def _print_summary(path, data, keys: list[str]) -> None:
    """A table of what was timed (median, peak memory, or the error), then the file."""
    records = [data.records[k] for k in keys if k in data.records]
    ok = [r for r in records if r.status == "ok"]
    rows = [("problem", "name", "median ms", "peak memory")]
    for r in records:
        if r.status == "ok" and r.timing is not None:
            rows.append((r.key, r.name[:32], f"{r.timing.median:.4g}", _mem(r.peak_mem_bytes)))
        else:
            rows.append((r.key, r.name[:32], r.status, (r.error or "").splitlines()[0][:60]
                         if r.error else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"{len(ok)}/{len(records)} timed on {data.hardware.name} ({data.precision}, "
          f"{data.mode}) -> {path}")
    paced = [r.key for r in ok if r.timing and (r.timing.launch_share or 0) >= HOST_PACED]
    if paced:
        print(f"note: {len(paced)} problem(s) spent {HOST_PACED:.0%} or more of each call "
              f"launching kernels: their times are the host CPU's pace as much as the GPU's "
              f"(each record's host_work_ms says how fast the host ran): {_some(paced)}")
    slow = [r.key for r in ok if any(v.host_full_pace is False for v in r.visits or [])]
    if slow:
        print(f"note: {len(slow)} launch-heavy problem(s) did not get two agreeing timings "
              f"at the host CPU's full pace within {HOST_WAIT_S:g} s: their times may differ "
              f"between runs by more than the rest: {_some(slow)}")


def _some(keys: list[str], n: int = 8) -> str:
    return ", ".join(keys[:n]) + (" ..." if len(keys) > n else "")


def _mem(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


if __name__ == "__main__":
    sys.exit(run_cli(main))
