"""What every command line shares: one-line errors for user mistakes, exit code 2, and
the selection flags (source, level, problems, name)."""

from __future__ import annotations

import argparse
import sys
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
