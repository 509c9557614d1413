"""What every command line shares: one-line errors for user mistakes, exit code 2, the
selection flags (source, level, problems, name), and the flags of how candidates are
built and run (eval and run both evaluate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from kb_eval.errors import UserError


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a command; a UserError is one line on stderr and exit code 2."""
    try:
        return int(main(argv) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what was finished is saved; rerun with --resume", file=sys.stderr)
        return 130


class Parser(argparse.ArgumentParser):
    """argparse that reports bad flags the same way as our other user errors."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def add_selection_flags(p: argparse.ArgumentParser, default_source: str) -> None:
    g = p.add_argument_group("problem selection")
    g.add_argument("--source", default=default_source,
                   help="bundled suite (ops, bert), a KernelBench-layout folder "
                        "(level<N>/<id>_<Name>.py), or hf[:repo-id-or-local-dir] for the "
                        f"KernelBench dataset (default: {default_source})")
    g.add_argument("--level", type=int, default=None, help="only this level (default: all)")
    g.add_argument("--problems", default=None, metavar="IDS",
                   help="problem ids and ranges, e.g. 1-10,15 (default: all)")
    g.add_argument("--name", default=None, help="only problems whose name contains this")


def add_precision_flag(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default=default,
                   help=f"dtype of inputs and weights; fp32 runs with TF32 off (default: {default})")


def add_execution_flags(p: argparse.ArgumentParser, defaults) -> None:
    """Where and how candidates build and run (kb_eval.eval and kb_eval.run)."""
    g = p.add_argument_group("building and running candidates")
    g.add_argument("--jobs", type=int, default=None,
                   help="parallel builds (default: the CPU cores + 25%%: builds have serial "
                        "gaps, and run niced so GPU work never waits)")
    g.add_argument("--gpus", default=None,
                   help="GPU ids to evaluate on, comma-separated (default: all visible)")
    g.add_argument("--build-timeout", type=float, default=defaults.build_timeout_s,
                   help=f"seconds per build (default: {defaults.build_timeout_s:g})")
    g.add_argument("--run-timeout", type=float, default=defaults.run_timeout_s,
                   help=f"seconds per candidate run (default: {defaults.run_timeout_s:g})")
    g.add_argument("--mem-limit-mb", type=int, default=defaults.mem_limit_mb,
                   help=f"host memory per child (default: {defaults.mem_limit_mb})")
    g.add_argument("--no-pch", action="store_true",
                   help="do not precompile torch/extension.h for C++ builds (by default the "
                        "first build makes one, ~45 s, and later builds with the same flags "
                        "compile their main.cpp about 3x faster)")
    g.add_argument("--cache-dir", type=Path, default=defaults.cache_dir,
                   help=f"build cache and scratch space (default: {defaults.cache_dir})")


def execution_config(args) -> dict:
    """EvalConfig fields from add_execution_flags' flags."""
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be at least 1 (got {args.jobs})")
    cfg = dict(cache_dir=Path(args.cache_dir).resolve(), build_timeout_s=args.build_timeout,
               run_timeout_s=args.run_timeout, mem_limit_mb=args.mem_limit_mb,
               pch=not args.no_pch,
               devices=[g.strip() for g in args.gpus.split(",")] if args.gpus else None)
    if args.jobs:
        cfg["jobs"] = args.jobs
    return cfg
