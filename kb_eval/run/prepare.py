"""What a run needs before the first question: the problems asked, the eval context
and the results file (reopened on --resume)."""

from __future__ import annotations

from pathlib import Path

from kb_eval.errors import UserError
from kb_eval.run.flags import CPU_QUICK, RESUMED_FLAGS


def answerable(model, problems: list, precision: str) -> list:
    """The problems the reference model has solutions for."""
    from kb_eval.solutions import pick

    index = model.index()  # no solutions for this backend at all: a UserError
    have = [p for p in problems if pick(index.get(p.key), precision)]
    skipped = [p.key for p in problems if p not in have]
    if not have:
        raise UserError(f"the reference model has no {model.backend} solution for the "
                        f"selected problems")
    if skipped:
        print(f"note: the reference model has no {model.backend} solution for "
              f"{', '.join(skipped)}; not asked")
    return have


def prepare_context(config, problems, stored: dict):
    """The eval context; without a usable baseline file the reference is timed live."""
    from kb_eval.eval.schedule.context import create_checked

    may_go_live = (config.baseline_mode == "eager"
                   and stored.get("baseline") in (None, "", "live"))
    ctx, note = create_checked(config, problems, may_go_live)
    if note:
        print(f"note: {note}")
    return ctx


def cpu_default_selection(args, backend: str) -> None:
    """On the CPU with no problem selected, ask the quick set (CPU_QUICK) and say so."""
    source, name = CPU_QUICK
    chosen = (args.level, args.problems, args.name)
    if backend != "cpp" or args.source != source or any(chosen) or args.full_suite:
        return
    args.name = name
    print(f"note: on the CPU, {source} runs its {name} problems by default (every level and "
          f"kernel, small shapes); --full-suite asks all of them")


def make_writer(path: Path, ctx, **kw):
    """RunWriter that also keeps the run's inference totals (tokens, cost) in the file."""
    from kb_eval.eval import RunWriter
    from kb_eval.report import usage_totals

    class Writer(RunWriter):
        def _write(self) -> None:
            self.file.usage = usage_totals(self.file.samples)
            super()._write()

        def save(self) -> None:
            with self.lock:
                self._write()

    return Writer(path, ctx, **kw)


def open_writer(run_dir: Path, run: str, ctx, model, endpoint, args, problems: list):
    """The run's results file, created or reopened, saved at once with its flags."""
    from kb_eval.results import Producer, stored_producer

    # Read before the writer rewrites the file: a resumed run lists every invocation.
    previous = stored_producer(run_dir / "results.json") if args.resume else None
    writer = make_writer(run_dir / "results.json", ctx, name=model.name, run=run,
                         source=args.source, problems_asked=[p.key for p in problems],
                         samples_per_problem=args.samples, resume=args.resume)
    # Failed requests are asked again on resume: drop their records.
    writer.file.samples = [r for r in writer.file.samples if r.status != "inference_error"]
    writer.file.produced_by = Producer(tool="kb_eval.run").continuing(previous)
    writer.file.run_args = {flag: getattr(args, flag) for flag in RESUMED_FLAGS}
    writer.file.model = ({"name": endpoint.name, "endpoint": endpoint.base_url,
                          "model": endpoint.model, "params": endpoint.request_params()}
                         if endpoint else {"name": model.name, "endpoint": None})
    writer.save()
    return writer
