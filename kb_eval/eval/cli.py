"""python -m kb_eval.eval: evaluate candidate kernel files, write results.json, print scores."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

from kb_eval.cli import (Parser, add_checking_flags, add_count_flag, add_execution_flags,
                         add_level_flag, add_precision_flag, add_quiet_flag,
                         add_results_dir_flag, baseline_mode, check_tolerances,
                         execution_config, run_cli, writable_dir)
from kb_eval.errors import UserError
from kb_eval.ray_cluster import add_executor_flags, executor_config
from kb_eval.eval.api import RunWriter, evaluate
from kb_eval.eval.schedule.context import create_checked
from kb_eval.eval.candidates import (find_candidates, match_problems, misnamed,
                                     save_code, skipped_warnings, within)
from kb_eval.eval.config import EvalConfig
from kb_eval.problems import load_problems
from kb_eval.progress import progress_bar
from kb_eval.report import samples_table, summary_table
from kb_eval.results import Producer, slugify, stored_fields, stored_producer
from kb_eval.timing import TimingSettings

FILES_HELP = ("candidate files named level<L>_problem<ID>_sample<S>.py, folders of them, "
              "or a manifest .json listing {key, sample, path}")


def build_parser(defaults) -> argparse.ArgumentParser:
    p = Parser(prog="python -m kb_eval.eval",
               description="Build, check and time candidate kernels (ModelNew) against their "
                           "problems' references; each candidate builds and runs in its own "
                           "child process. Writes results/<name>/<run>/results.json.")
    p.add_argument("--candidates", nargs="+", required=True, metavar="PATH", help=FILES_HELP)
    p.add_argument("--source", default=defaults.source,
                   help="where the problems come from: a bundled suite (ops, bert), a "
                        "KernelBench-layout folder, or hf[:repo-or-dir] "
                        f"(default: {defaults.source})")
    add_level_flag(p, "problems asked = these levels of --source (with --problems), e.g. "
                      "--level 1 2 or 1,2; samples missing for them count as failures "
                      "(default: the candidates' problems)")
    p.add_argument("--problems", default=None, metavar="IDS",
                   help="problems asked, ids and ranges like 1-10,15 (see --level)")
    p.add_argument("--backend", choices=["auto", "cuda", "triton", "cpp"],
                   default=defaults.backend,
                   help="what the candidates are written in; cpp runs on the CPU, cuda and "
                        "triton on GPUs; auto = cuda with a GPU, else cpp "
                        f"(default: {defaults.backend})")
    add_precision_flag(p, defaults.precision)
    p.add_argument("--name", default=None,
                   help="results folder name, e.g. the model (default: the candidates' folder)")
    p.add_argument("--run", default=None,
                   help="run folder under results/<name>/ (default: a new timestamp; with "
                        "--resume: the latest run)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run's results.json, skipping samples already recorded")
    add_count_flag(p, "--trials", "timed calls per candidate (untimed calls before them and "
                   "correctness trials: DEFAULTS warmup, cpu_warmup, correct_trials)",
                   defaults.trials, defaults.cpu_trials)
    add_results_dir_flag(p, defaults.results_dir, "where results and baselines live")
    add_quiet_flag(p)
    add_checking_flags(p)
    add_execution_flags(p)
    add_executor_flags(p)
    return p


def make_config(args, defaults, cuda: bool) -> EvalConfig:
    if args.trials is not None and args.trials < 1:
        raise UserError(f"--trials must be at least 1 (got {args.trials})")
    check_tolerances(args)
    backend = args.backend if args.backend != "auto" else ("cuda" if cuda else "cpp")
    trials = args.trials or (defaults.cpu_trials if backend == "cpp" else defaults.trials)
    warmup = defaults.cpu_warmup if backend == "cpp" else defaults.warmup
    cfg = dict(backend=backend, precision=args.precision,
               correct_trials=defaults.correct_trials,
               timing=TimingSettings(warmup=warmup, trials=trials,
                                     budget_ms=defaults.timing_budget_ms),
               atol=args.atol, rtol=args.rtol,
               tolerance=args.tolerance,
               live_baseline=args.live_baseline, results_dir=args.results_dir,
               baseline_mode=baseline_mode(args.baseline_compile),
               keep_workdirs=args.keep_workdirs,
               **execution_config(args, defaults, backend == "cpp"),
               **executor_config(args))
    return EvalConfig(**cfg)


def run_folder(args, name: str) -> str:
    """The run's folder name: --run, else (resuming) the latest run, else a timestamp. A
    --resume must find a run to continue: starting afresh would redo everything."""
    run_root = args.results_dir / name
    if args.run:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.run):
            raise UserError(f"--run {args.run!r}: use letters, digits, '.', '_' and '-'")
        if args.resume and not (run_root / args.run / "results.json").is_file():
            raise UserError(f"--resume: nothing to resume, {run_root / args.run / 'results.json'}"
                            f" does not exist")
        return args.run
    if args.resume:
        runs = sorted((d for d in run_root.glob("*") if
                       (d / "results.json").is_file()), key=lambda d: d.stat().st_mtime)
        if not runs:
            raise UserError(f"--resume: no run under {run_root} to continue")
        return runs[-1].name
    return time.strftime("%Y%m%d-%H%M%S")


def main(argv: list[str] | None = None) -> int:
    import torch

    from kb_eval.settings import load_settings

    defaults = load_settings().defaults
    args = build_parser(defaults).parse_args(argv)
    args.results_dir = writable_dir(args.results_dir, "--results-dir")
    cands = find_candidates(args.candidates)
    name = slugify(args.name or _default_name(args.candidates))
    run = run_folder(args, name)
    problems = load_problems(args.source)
    pairs = match_problems(cands, problems, where=f"--source {args.source}")
    asked = ([p for p in load_problems(args.source, args.level, args.problems)]
             if args.level is not None or args.problems else
             list({p.key: p for p, _ in pairs}.values()))
    pairs, outside = within(pairs, asked)  # a selection is never silently ignored
    if outside and not pairs:
        raise UserError(f"no candidate for {_selection(args)}: the {len(outside)} given are "
                        f"for other problems")
    for line in skipped_warnings(misnamed(args.candidates), outside, _selection(args)):
        print(line, file=sys.stderr)
    config = make_config(args, defaults, torch.cuda.is_available())
    path = args.results_dir / name / run / "results.json"
    stored = stored_fields(path) if args.resume else {}
    # As kb_eval.run: no baseline file -> the reference is timed live, with a note; unless
    # a file was asked for (--baseline-compile) or the resumed run was scored against one.
    ctx, note = create_checked(config, asked, may_go_live=not args.baseline_compile
                               and stored.get("baseline") in (None, "", "live"))
    if note:
        print(f"note: {note}")
    counts = Counter((p.level, p.problem_id) for p, _ in pairs)
    per_problem = max([counts[(p.level, p.problem_id)] for p in asked] + [1])
    previous = stored_producer(path) if args.resume else None
    writer = RunWriter(path, ctx, name=name, run=run, source=args.source,
                       problems_asked=[p.key for p in asked],
                       samples_per_problem=per_problem, resume=args.resume)
    writer.file.produced_by = Producer(tool="kb_eval.eval").continuing(previous)
    done = writer.done()
    todo = [(p, c.sample, c.path.read_text()) for p, c in pairs
            if (p.key, c.sample, 0) not in done]
    code_paths = {(p.key, sample): save_code(path.parent, p, sample, source)
                  for p, sample, source in todo}
    print(f"{len(todo)} sample(s) to evaluate ({len(pairs) - len(todo)} already recorded) on "
          f"{ctx.hardware.name} [{ctx.backend}, {config.precision}] -> {writer.path}")
    with progress_bar(len(todo), args.quiet) as bar:
        for record in evaluate(todo, context=ctx):
            record.code_path = code_paths.get((record.key, record.sample))
            writer.add(record)
            bar.set_postfix_str(f"{record.key} s{record.sample}: {record.status}", refresh=False)
            bar.update()
    with writer.lock:  # saves produced_by even when nothing was left to evaluate
        writer._write()
    # The same tables as kb_eval.run prints: each sample's verdict, then the scores in %.
    print(samples_table(writer.file))
    print(summary_table(writer.file))
    return 0


def _selection(args) -> str:
    """The selection flags as typed, for messages: `--level 1 --problems 1-3`."""
    return " ".join(f for f in (f"--level {' '.join(map(str, args.level))}"
                                if args.level is not None else "",
                                f"--problems {args.problems}" if args.problems else "") if f)


def _default_name(paths: list[str]) -> str:
    first = Path(paths[0]).expanduser().resolve()
    return (first if first.is_dir() else first.parent).name


def entry(argv: list[str] | None = None) -> int:
    return run_cli(main, argv)
