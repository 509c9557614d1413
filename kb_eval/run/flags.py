"""The flags of `python -m kb_eval.run` and what they turn into: the parser, what a
--resume takes from its run, the run folder and the EvalConfig. Free of torch at import
time, so --help and flag errors answer at once."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from kb_eval.cli import (Parser, add_checking_flags, add_count_flag, add_execution_flags,
                         add_precision_flag, add_quiet_flag, add_results_dir_flag,
                         add_selection_flags, baseline_mode, check_tolerances,
                         execution_config)
from kb_eval.errors import UserError
from kb_eval.ray_cluster import add_executor_flags, executor_config

PROMPTS = ("zero_shot", "one_shot", "few_shot")
# a CPU run's default problems: bert's batch 64 x seq 64 ones (`--full-suite`: all)
CPU_QUICK = ("bert", "b64s64")
# flags a --resume takes from its run when not given again (so the run stays one run)
RESUMED_FLAGS = ("source", "level", "problems", "name", "backend", "precision", "prompt",
                 "samples", "turns", "trials", "warmup", "correct_trials", "live_baseline",
                 "atol", "rtol", "baseline_compile", "tolerance")


def build_parser(defaults) -> Parser:
    """The command line; RESUMED_FLAGS default to None here (see flag_defaults)."""
    p = Parser(prog="python -m kb_eval.run",
               description="Ask a model (an OpenAI-compatible endpoint from config.py, or the "
                           "offline `reference` model) to write kernels for each problem, "
                           "build/check/time every answer in isolated child processes while "
                           "the next answers arrive, and score the run. Writes "
                           "results/<model>/<run>/results.json after every sample.")
    p.add_argument("--model", default="reference",
                   help="a name from MODELS in config.py (see --list-models), or `reference`: "
                        "answers with the hand-written solutions, offline, no key "
                        "(default: reference)")
    p.add_argument("--list-models", action="store_true",
                   help="print the configured models (endpoint, model id, API key variable "
                        "and whether it is set, concurrency, prices) and exit")
    add_selection_flags(p, defaults.source)
    p.add_argument("--backend", choices=["auto", "cuda", "triton", "cpp"],
                   help="what the model is asked to write; cpp runs on the CPU, cuda and "
                        "triton on GPUs; auto = cuda with a GPU, else cpp "
                        f"(default: {defaults.backend})")
    add_precision_flag(p, defaults.precision)
    _add_asking_flags(p)
    _add_run_flags(p)
    _add_timing_flags(p, defaults)
    add_quiet_flag(p)
    add_checking_flags(p)
    add_execution_flags(p)
    add_executor_flags(p)
    p.set_defaults(**{flag: None for flag in RESUMED_FLAGS})
    return p


def _add_asking_flags(p: Parser) -> None:
    """What the model is asked, and how many times."""
    p.add_argument("--prompt", choices=PROMPTS,
                   help="prompt style: zero_shot (task only), one_shot or few_shot (1 or 2 "
                        "worked examples) (default: one_shot)")
    p.add_argument("--samples", type=int, metavar="K",
                   help="independent answers per problem, scored with pass@k (default: 1)")
    p.add_argument("--turns", type=int, metavar="T",
                   help="refinement turns per sample: after each evaluation the build error, "
                        "output mismatch or timing goes back to the model, which answers "
                        "again; each turn is its own record, the last one is scored "
                        "(default: 1)")


def _add_run_flags(p: Parser) -> None:
    """Which run folder the results go to, and whether an old run is continued."""
    p.add_argument("--run", default=None,
                   help="run folder under results/<model>/ (default: a new timestamp; with "
                        "--resume: the latest run)")
    p.add_argument("--full-suite", action="store_true",
                   help=f"on the CPU, ask every problem of the default suite: without it and "
                        f"without --level/--problems/--name, a CPU run of {CPU_QUICK[0]} asks "
                        f"only its {CPU_QUICK[1]} problems (every level and kernel, small "
                        f"shapes: a few minutes on 2 cores instead of ~15)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest (or --run) run: recorded samples are skipped, "
                        "answers already received come from its response cache, and flags "
                        "not given again are taken from the run")


def _add_timing_flags(p: Parser, defaults) -> None:
    """How answers and the PyTorch reference are checked and timed."""
    add_count_flag(p, "--trials", "timed calls per sample (untimed calls before them and "
                   "correctness trials: DEFAULTS warmup, cpu_warmup, correct_trials)",
                   defaults.trials, defaults.cpu_trials, on_cpu="for cpp on the CPU")
    add_results_dir_flag(p, defaults.results_dir, "where runs and baselines live")


def flag_defaults(defaults) -> dict:
    """The defaults of RESUMED_FLAGS, applied after a resumed run had its say."""
    return {"source": defaults.source, "level": None, "problems": None, "name": None,
            "backend": defaults.backend, "precision": defaults.precision,
            "prompt": "one_shot", "samples": 1, "turns": 1, "trials": None,
            "warmup": None, "correct_trials": defaults.correct_trials,
            "live_baseline": False, "atol": None, "rtol": None, "baseline_compile": None,
            "tolerance": "f64"}


def fill_flags(args, defaults, stored: dict) -> None:
    """Flags not given: the resumed run's value, else the default."""
    fallback = flag_defaults(defaults)
    for flag in RESUMED_FLAGS:
        if getattr(args, flag) is None:
            setattr(args, flag, stored.get(flag, fallback[flag]))


def check_numbers(args) -> None:
    """Reject counts below their minimum and run names that are not plain folder names,
    before any work (and again once a resumed run's values are filled in)."""
    for flag, low in (("samples", 1), ("turns", 1), ("trials", 1)):
        value = getattr(args, flag)
        if value is not None and value < low:
            raise UserError(f"--{flag.replace('_', '-')} must be at least {low} (got {value})")
    check_tolerances(args)
    if args.run is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.run):
        raise UserError(f"--run {args.run!r}: use letters, digits, '.', '_' and '-'")


def pick_run(args, model_dir: Path) -> str:
    """The run folder's name: --run, else (resuming) the latest run, else a timestamp."""
    if args.run:
        if args.resume and not (model_dir / args.run / "results.json").is_file():
            raise UserError(f"--resume: nothing to resume, "
                            f"{model_dir / args.run / 'results.json'} does not exist")
        return args.run
    if args.resume:
        runs = sorted((d for d in model_dir.glob("*") if (d / "results.json").is_file()),
                      key=lambda d: (d / "results.json").stat().st_mtime)
        if not runs:
            raise UserError(f"--resume: no run under {model_dir} to continue")
        return runs[-1].name
    return time.strftime("%Y%m%d-%H%M%S")


def stored_run(path: Path) -> dict:
    """The raw results.json of a run being resumed ({} when there is none yet)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise UserError(f"cannot resume: {path} is not readable JSON ({e})") from None


def eval_config(args, defaults, cuda: bool):
    """The EvalConfig of the run; backend-dependent defaults are filled into `args` here."""
    from kb_eval.eval import EvalConfig
    from kb_eval.timing import TimingSettings

    backend = args.backend if args.backend != "auto" else ("cuda" if cuda else "cpp")
    on_cpu = backend == "cpp"
    args.trials = args.trials or (defaults.cpu_trials if on_cpu else defaults.trials)
    if args.warmup is None:
        args.warmup = defaults.cpu_warmup if on_cpu else defaults.warmup
    cfg = dict(backend=backend, precision=args.precision, correct_trials=args.correct_trials,
               timing=TimingSettings(warmup=args.warmup, trials=args.trials,
                                     budget_ms=defaults.timing_budget_ms),
               live_baseline=bool(args.live_baseline),
               baseline_mode=baseline_mode(args.baseline_compile),
               atol=args.atol, rtol=args.rtol, tolerance=args.tolerance,
               keep_workdirs=args.keep_workdirs,
               # absolute: the build and run children work in other folders
               results_dir=Path(args.results_dir).resolve(),
               **execution_config(args, defaults, on_cpu),
               **executor_config(args))
    return EvalConfig(**cfg)
