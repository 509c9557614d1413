"""What every command line shares: one-line errors for user mistakes (exit code 2), the
selection flags, --results-dir, device-dependent counts (--trials), and the flags of how
candidates are built and run; finer knobs are the config's DEFAULTS (settings.py)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from kb_eval.errors import UserError


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a command; a UserError is one line on stderr and exit code 2. `kill` (SIGTERM)
    stops it as Ctrl-C does: children killed, what was finished saved, exit 130."""
    try:
        with sigterm_as_interrupt():
            return int(main(argv) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what was finished is saved; rerun with --resume", file=sys.stderr)
        return 130


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Inside, SIGTERM raises KeyboardInterrupt as Ctrl-C does (main thread only; elsewhere
    a handler cannot be set); the handler from before comes back after, so a caller in
    the same process (a test) keeps its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


class Parser(argparse.ArgumentParser):
    """argparse that reports bad flags the same way as our other user errors."""

    def error(self, message: str):  # noqa: D401 - argparse API
        # One line, like every other user mistake (the usage block would bury it).
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def add_selection_flags(p: argparse.ArgumentParser, default_source: str) -> None:
    g = p.add_argument_group("problem selection")
    g.add_argument("--source", default=default_source,
                   help="bundled suite (ops, bert), a KernelBench-layout folder "
                        "(level<N>/<id>_<Name>.py), or hf[:repo-id-or-local-dir] for the "
                        f"KernelBench dataset (default: {default_source})")
    add_level_flag(g, "only these levels, e.g. --level 1 2 or --level 1,2 (default: all)")
    g.add_argument("--problems", default=None, metavar="IDS",
                   help="problem ids and ranges, e.g. 1-10,15 (default: all)")
    g.add_argument("--name", default=None, help="only problems whose name contains this")


def parse_levels(text: str) -> list[int]:
    """One --level word: '2' or '1,2' (several words are joined by add_level_flag)."""
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad level {text!r}: use numbers like 1 or 1,2")
    if not levels or any(v < 1 for v in levels):
        raise argparse.ArgumentTypeError(f"bad level {text!r}: levels are numbers from 1")
    return levels


class _Levels(argparse.Action):
    """--level 1 2 and --level 1,2 both become [1, 2] (sorted, no repeats)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, sorted({v for word in values for v in word}))


def add_level_flag(g, help_text: str) -> None:
    g.add_argument("--level", nargs="+", type=parse_levels, action=_Levels, default=None,
                   metavar="N", help=help_text)


def add_precision_flag(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default=default,
                   help=f"dtype of inputs and weights; fp32 runs with TF32 off (default: {default})")


def add_count_flag(p: argparse.ArgumentParser, flag: str, what: str, gpu: int, cpu: int,
                   on_cpu: str = "on CPU") -> None:
    """A count (--trials, ...) whose default depends on the device: None here,
    filled in once the device is known."""
    p.add_argument(flag, type=int, default=None,
                   help=f"{what} (default: {gpu} on GPU, {cpu} {on_cpu})")


def add_results_dir_flag(p: argparse.ArgumentParser, default: Path, what: str) -> None:
    p.add_argument("--results-dir", type=Path, default=default,
                   help=f"{what} (default: {default})")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile's modes
# Baseline files of Apache TVM builds (`kb_eval.baseline --compile tvm` or `tvm-noarch`)
TVM_BASELINES = ("tvm", "tvm-noarch")


def baseline_mode(compile_mode: str | None) -> str:
    """EvalConfig.baseline_mode (and the baseline file's suffix) of --baseline-compile."""
    if compile_mode in TVM_BASELINES:  # the file's own suffix: <precision>_tvm.json
        return compile_mode
    return f"compile-{compile_mode}" if compile_mode else "eager"


def add_checking_flags(p: argparse.ArgumentParser) -> None:
    """How outputs are compared and what is kept (kb_eval.eval and kb_eval.run)."""
    g = p.add_argument_group("checking and scoring candidates")
    g.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: 1e-4 for fp32, 1e-2 for fp16, 2e-2 "
                        "for bf16)")
    g.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: as --atol)")
    g.add_argument("--tolerance", choices=["f64", "kernelbench"], default="f64",
                   help="which rule decides correctness: f64 = error against the reference "
                        "run in float64 within 256x the reference's own error (64x in norm), "
                        "so another summation order passes and a TF32/fp16/bf16 shortcut "
                        "fails; kernelbench = allclose at --atol/--rtol. Every record carries "
                        "both verdicts; a problem file may name its own (KB_TOLERANCE) "
                        "(default: f64)")
    g.add_argument("--keep-workdirs", action="store_true",
                   help="keep each sample's scratch folder (outputs, logs) for debugging")
    g.add_argument("--live-baseline", action="store_true",
                   help="time the PyTorch reference (as --baseline-compile says, else "
                        "eager) in this run instead of reading "
                        "results/baseline/<hardware>/<source>/<precision>.json (timed live "
                        "anyway, with a note, when that file is missing or lacks a problem)")
    g.add_argument("--baseline-compile", default=None, metavar="MODE",
                   choices=[*COMPILE_MODES, *TVM_BASELINES],
                   help="score against the torch.compile baseline file made by `python -m "
                        "kb_eval.baseline --compile MODE` (one of "
                        f"{', '.join(COMPILE_MODES)}), or the Apache TVM one (tvm, "
                        "tvm-noarch: `--compile tvm` or `--compile tvm-noarch`), instead "
                        "of the eager one; a missing file is an error, never replaced by "
                        "live timing. With --live-baseline: the reference compiled so is "
                        "timed in this run (built once per problem in the reference "
                        "server; a problem the compiler cannot take gets no speedup, "
                        "flagged no_baseline with the reason)")


def check_tolerances(args) -> None:
    """Negative tolerances are mistakes, reported before any work."""
    for flag in ("atol", "rtol"):
        v = getattr(args, flag, None)
        if v is not None and v < 0:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 0 (got {v:g})")


def add_quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def writable_dir(path: Path | str, flag: str, given: Path | str | None = None) -> Path:
    """A folder we are about to write into, probed with a scratch file, so a problem is one
    line before any work (os.access says yes to root, even read-only). `given`: what the
    user typed, when `path` is the folder of a file they named."""
    path = Path(path).expanduser()
    flag = f"{flag} {given if given is not None else path}"
    blocker = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise UserError(f"{flag}: {blocker} is a file, not a folder")
    # Probe where the first write will land: the folder itself, or the nearest existing
    # one above it, in which the missing folders will be made. Nothing is created here, so
    # a mistake found after this check leaves no empty results folder behind.
    probe = blocker if blocker is not None else Path.cwd()
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".kb_eval_probe_"):
            pass
    except OSError as e:
        raise UserError(f"{flag}: cannot write to {path} ({e.strerror or e})") from None
    return path


def check_gpus_visible(spec: str | None, flag: str = "--gpus") -> None:
    """GPUs asked for on a machine that has none: refuse rather than ignore the flag."""
    if not spec:
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(f"{flag} {spec}: no GPU visible (torch sees no CUDA device)")


# Candidate children in flight per GPU unless DEFAULTS["lane_depth"] says otherwise
# (docs/PERFORMANCE.md, "Lane depth"); a large problem gets fewer neighbours by its plan.
GPU_LANE_DEPTH = 3


def lane_depth(defaults, cpu: bool) -> int:
    """The config's DEFAULTS["lane_depth"] when it sets one, else GPU_LANE_DEPTH on a GPU
    and 1 on a CPU, where the children would share the cores their timings run on."""
    if "lane_depth" in defaults.model_fields_set:
        return defaults.lane_depth
    return 1 if cpu else GPU_LANE_DEPTH


def add_execution_flags(p: argparse.ArgumentParser) -> None:
    """Where and how candidates build and run (kb_eval.eval, kb_eval.run, kb_eval.check);
    the build cache, the time limits and the finer knobs are the config's DEFAULTS
    (execution_config)."""
    g = p.add_argument_group("building and running candidates",
                             "build cache, build and run time limits, memory per child and "
                             "more: DEFAULTS in config.py (cache_dir, build_timeout_s, "
                             "run_timeout_s, ...; docs/FLAGS.md)")
    g.add_argument("--jobs", type=int, default=None,
                   help="parallel builds (default: the CPU cores + 25%%: builds have serial "
                        "gaps, and run niced so GPU work never waits)")
    g.add_argument("--gpus", default=None,
                   help="GPU ids to evaluate on, comma-separated (default: all visible)")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run candidates without the sandbox (their own namespaces, no "
                        "network, no secrets, writes only to their scratch: "
                        "docs/GUARANTEES.md), for hosts without user namespaces or "
                        "Landlock; a candidate can then read your environment, signal "
                        "the evaluator and write your files; every record says sandbox: "
                        "false")


def execution_config(args, defaults, cpu: bool) -> dict:
    """EvalConfig fields from add_execution_flags' flags and the knobs only the config's
    DEFAULTS set (docs/FLAGS.md, "Settings in config.py"). `cpu`: candidates run on the CPU."""
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be at least 1 (got {args.jobs})")
    check_gpus_visible(args.gpus)
    writable_dir(defaults.cache_dir, "DEFAULTS.cache_dir")
    cfg = dict(cache_dir=Path(defaults.cache_dir).expanduser().resolve(),
               build_timeout_s=defaults.build_timeout_s,
               run_timeout_s=defaults.run_timeout_s, mem_limit_mb=defaults.mem_limit_mb,
               lane_depth=lane_depth(defaults, cpu), cpu_lanes=defaults.cpu_lanes,
               load_budget_s=defaults.load_budget_s, call_budget_s=defaults.call_budget_s,
               recheck_timed=defaults.recheck_timed, count_launches=defaults.count_launches,
               devices=[g.strip() for g in args.gpus.split(",")] if args.gpus else None)
    if args.jobs:
        cfg["jobs"] = args.jobs
    cfg["sandbox"] = sandbox_available(args.no_sandbox, cfg["cache_dir"])
    return cfg


def sandbox_available(no_sandbox: bool, cache_dir: Path) -> bool:
    """Whether candidates run sandboxed: yes unless --no-sandbox (said in one line), and
    never silently not: a sandbox that cannot start here is a one-line refusal."""
    if no_sandbox:
        print("kb_eval: warning: --no-sandbox: candidate code runs with your rights, "
              "environment and network", file=sys.stderr)
        return False
    from kb_eval.isolation import sandbox, sandbox_probe

    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    why = sandbox_probe.probe(sandbox.Policy(write=[str(cache_dir)]))
    if why is not None:
        raise UserError(f"the sandbox cannot start on this host ({why.splitlines()[0]}); "
                        f"--no-sandbox runs candidates without it")
    return True
