"""TVM's flag for the baseline (--tvm-tune beside --compile tvm or tvm-noarch) and the
mode string it makes. Imports neither torch nor tvm, so --help stays fast."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

from kb_eval.errors import UserError


def add_tvm_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tvm-tune", type=int, default=0, metavar="N",
                   help="with --compile tvm or tvm-noarch: MetaSchedule tuning, N trials "
                        "per task, before building (the database is cached under "
                        "<cache_dir>/tvm; raise --timeout, tuning takes minutes per problem) "
                        "(default: 0, no tuning)")


def baseline_mode_of(args: argparse.Namespace, cache_dir: Path) -> str:
    """The baseline's mode string (eager, compile-<mode>, tvm[-noarch][-tuneN]); checks
    --tvm-tune and that TVM is installed."""
    tvm = args.compile_mode in ("tvm", "tvm-noarch")
    if not tvm:
        if args.tvm_tune:
            raise UserError("--tvm-tune needs --compile tvm or tvm-noarch")
        return f"compile-{args.compile_mode}" if args.compile_mode else "eager"
    if args.tvm_tune < 0:
        raise UserError(f"--tvm-tune must be at least 0 (got {args.tvm_tune})")
    if importlib.util.find_spec("tvm") is None:
        raise UserError(f"--compile {args.compile_mode} needs Apache TVM: pip install "
                        "'kb-eval[tvm]' (apache-tvm)")
    if args.tvm_tune:  # the children read it: one database per module and target
        os.environ["KB_EVAL_TVM_CACHE"] = str(Path(cache_dir).expanduser().resolve() / "tvm")
    return tvm_mode(arch=args.compile_mode == "tvm", tune_trials=args.tvm_tune)


def tvm_mode(arch: bool, tune_trials: int) -> str:
    """tvm, tvm-noarch, tvm-tune64, tvm-noarch-tune64 (kb_eval.compilers.tvm parses it)."""
    return "tvm" + ("" if arch else "-noarch") + (f"-tune{tune_trials}" if tune_trials else "")
