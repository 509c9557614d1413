"""`python -m kb_eval.run` (`entry`): check the flags and the model, find or continue the
run, then prepare, run and print the tables."""

from __future__ import annotations

import time
from pathlib import Path

from kb_eval.cli import run_cli, writable_dir
from kb_eval.errors import UserError
from kb_eval.run.flags import (build_parser, check_numbers, eval_config, fill_flags,
                               pick_run, stored_run)
from kb_eval.run.prepare import (answerable, cpu_default_selection, open_writer,
                                 prepare_context)
from kb_eval.run.runner import Runner

REFERENCE_CONCURRENCY = 4


def main(argv: list[str] | None = None) -> int:
    """Settle the flags, the model and the run folder before any work."""
    from kb_eval.inference.endpoints import check_api_key, resolve_model
    from kb_eval.results import slugify
    from kb_eval.settings import load_settings

    settings = load_settings()
    defaults = settings.defaults
    args = build_parser(defaults).parse_args(argv)
    if args.list_models:
        from kb_eval.report import models_table

        print(models_table(settings.models))
        return 0
    check_numbers(args)
    args.results_dir = writable_dir(args.results_dir, "--results-dir")
    endpoint = None
    if args.model != "reference":  # before any work: an unknown model or a missing key
        endpoint = resolve_model(args.model, settings.models)
        check_api_key(endpoint)
    model_dir = Path(args.results_dir) / slugify(args.model)
    run = pick_run(args, model_dir)
    run_dir = model_dir / run
    results_path = run_dir / "results.json"
    if results_path.exists() and not args.resume:
        raise UserError(f"{results_path} exists: pass --resume to continue it, or pick "
                        f"another --run")
    stored = stored_run(results_path) if args.resume else {}
    fill_flags(args, defaults, stored.get("run_args", {}) if stored else {})
    if stored.get("baseline") == "live":
        args.live_baseline = True
    check_numbers(args)
    if endpoint is not None and args.samples > 1 and not endpoint.reasoning \
            and not endpoint.temperature:
        print(f"note: {endpoint.name} samples at temperature {endpoint.temperature}: its "
              f"{args.samples} samples per problem may be identical (set temperature in "
              f"config.py for a meaningful pass@k)")
    return execute(args, settings, endpoint, run, run_dir, stored)


def execute(args, settings, endpoint, run: str, run_dir: Path, stored: dict) -> int:
    """Everything after the flags are settled: the work, then the tables."""
    import torch

    from kb_eval.inference.models import get_model
    from kb_eval.problems import load_problems
    from kb_eval.report import samples_table, summary_table

    config = eval_config(args, settings.defaults, torch.cuda.is_available())
    cpu_default_selection(args, config.backend)
    problems = load_problems(args.source, args.level, args.problems, args.name)
    model = get_model(args.model, settings.models, backend=config.backend,
                      cache_dir=run_dir / "responses", precision=args.precision)
    if endpoint is None:
        problems = answerable(model, problems, args.precision)
    ctx = prepare_context(config, problems, stored)
    writer = open_writer(run_dir, run, ctx, model, endpoint, args, problems)
    started = time.monotonic()
    concurrency = endpoint.max_concurrency if endpoint else REFERENCE_CONCURRENCY
    Runner(model, ctx, writer, run_dir, args, concurrency).run(problems)
    writer.save()
    print(samples_table(writer.file))
    print(summary_table(writer.file))
    print(f"{time.monotonic() - started:.0f} s; results: {writer.path}")
    return 0


def entry(argv: list[str] | None = None) -> int:
    """main() as a command: user errors as one line, Ctrl-C and `kill` end it cleanly."""
    return run_cli(main, argv)
