"""python -m kb_eval.run: ask one model for kernels, evaluate its answers as they arrive, score.

    python -m kb_eval.run                                  # offline `reference` model, no key
    python -m kb_eval.run --model deepseek-chat --samples 5 --turns 3

How the work flows (threads):

    inference pool (model's max_concurrency) ──(problem, sample, code, turn)──► eval queue
         ▲                                                                          │
         │ next turn: history + answer + feedback           kb_eval.eval.evaluate   │
         │                                                                          ▼
    main thread ◄──── answers ──── records (evaluated, or answers without usable code)

Only the main thread touches state: it extracts the code of each answer (saved under
code/), queues it for evaluation, writes each record to results/<model>/<run>/results.json
(RunWriter, atomic, after every record) and, for multi-turn runs, asks the next turn when
the previous turn's record arrives. API answers are cached under responses/, so a rerun or
--resume sends nothing already answered; --resume skips samples already recorded.
"""

from __future__ import annotations

import json
import queue
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kb_eval.cli import (Parser, add_execution_flags, add_precision_flag, add_selection_flags,
                         execution_config, run_cli)
from kb_eval.errors import UserError

PROMPTS = ("zero_shot", "one_shot", "few_shot")
# Flags a --resume takes from the run when not given again (so the run stays one run).
RESUMED_FLAGS = ("source", "level", "problems", "name", "backend", "precision", "prompt",
                 "samples", "turns", "trials", "warmup", "correct_trials", "live_baseline")
EXTRACTION_FAILURES = ("no_code", "no_model_new", "syntax_error")
REFERENCE_CONCURRENCY = 4


# ------------------------------------------------------------------ flags
def build_parser(defaults) -> Parser:
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
    p.add_argument("--run", default=None,
                   help="run folder under results/<model>/ (default: a new timestamp; with "
                        "--resume: the latest run)")
    p.add_argument("--resume", action="store_true",
                   help="continue the latest (or --run) run: recorded samples are skipped, "
                        "answers already received come from its response cache, and flags "
                        "not given again are taken from the run")
    p.add_argument("--live-baseline", action="store_true",
                   help="time the PyTorch reference in this run instead of reading "
                        "results/baseline/<hardware>/<precision>.json (used anyway, with a "
                        "note, when that file is missing or lacks a problem)")
    p.add_argument("--trials", type=int,
                   help=f"timed calls per sample (default: {defaults.trials} on GPU, "
                        f"{defaults.cpu_trials} for cpp on the CPU)")
    p.add_argument("--warmup", type=int,
                   help=f"untimed calls before timing (default: {defaults.warmup} on GPU, "
                        f"{defaults.cpu_warmup} for cpp on the CPU)")
    p.add_argument("--correct-trials", type=int,
                   help=f"correctness trials, fresh inputs each (default: {defaults.correct_trials})")
    p.add_argument("--results-dir", type=Path, default=defaults.results_dir,
                   help=f"where runs and baselines live (default: {defaults.results_dir})")
    add_execution_flags(p, defaults)
    p.set_defaults(**{flag: None for flag in RESUMED_FLAGS})
    return p


def flag_defaults(defaults) -> dict:
    return {"source": defaults.source, "level": None, "problems": None, "name": None,
            "backend": defaults.backend, "precision": defaults.precision,
            "prompt": "one_shot", "samples": 1, "turns": 1, "trials": None,
            "warmup": None, "correct_trials": defaults.correct_trials,
            "live_baseline": False}


def fill_flags(args, defaults, stored: dict) -> None:
    """Flags not given: the resumed run's value, else the default."""
    fallback = flag_defaults(defaults)
    for flag in RESUMED_FLAGS:
        if getattr(args, flag) is None:
            setattr(args, flag, stored.get(flag, fallback[flag]))


def check_numbers(args) -> None:
    for flag, low in (("samples", 1), ("turns", 1), ("trials", 1), ("warmup", 0),
                      ("correct_trials", 1)):
        value = getattr(args, flag)
        if value is not None and value < low:
            raise UserError(f"--{flag.replace('_', '-')} must be at least {low} (got {value})")
    if args.run is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.run):
        raise UserError(f"--run {args.run!r}: use letters, digits, '.', '_' and '-'")


def pick_run(args, model_dir: Path) -> str:
    if args.run:
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
    from kb_eval.eval import EvalConfig
    from kb_eval.timing import TimingSettings

    backend = args.backend if args.backend != "auto" else ("cuda" if cuda else "cpp")
    on_cpu = backend == "cpp"
    args.trials = args.trials or (defaults.cpu_trials if on_cpu else defaults.trials)
    if args.warmup is None:
        args.warmup = defaults.cpu_warmup if on_cpu else defaults.warmup
    cfg = dict(backend=backend, precision=args.precision, correct_trials=args.correct_trials,
               timing=TimingSettings(warmup=args.warmup, trials=args.trials),
               live_baseline=bool(args.live_baseline),
               # absolute: the build and run children work in other folders
               results_dir=Path(args.results_dir).resolve(), **execution_config(args))
    return EvalConfig(**cfg)


def prepare_context(config, problems, stored: dict, live_asked: bool):
    """The eval context; without a usable baseline file (missing, or lacking a problem),
    the reference is timed live instead, with a note (unless a resumed run used the file)."""
    from kb_eval.eval import prepare

    if config.live_baseline:
        return prepare(config)
    try:
        ctx = prepare(config)
        ctx.check_baseline_covers(problems)
        return ctx
    except UserError as e:
        if stored.get("baseline") not in (None, "live") or live_asked:
            raise
        ctx = prepare(config.model_copy(update={"live_baseline": True}))
        print(f"note: {e}\nnote: timing the PyTorch reference live in this run instead")
        return ctx


# ------------------------------------------------------------------ the run
@dataclass
class Chain:
    """One sample of one problem, through its turns."""
    problem: object
    sample: int
    messages: list
    turn: int = 0


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


class Abandoned(Exception):
    """Raised into evaluate()'s intake so that it kills its children and returns."""


class Runner:
    def __init__(self, model, ctx, writer, run_dir: Path, args, concurrency: int):
        self.model, self.ctx, self.writer, self.run_dir, self.args = model, ctx, writer, run_dir, args
        self.concurrency = concurrency
        self.events: queue.Queue = queue.Queue()  # everything the main thread reacts to
        self.asks: queue.Queue = queue.Queue()  # chains to ask the model about | None
        self.eval_q: queue.Queue = queue.Queue()  # (problem, sample, code, turn) | None | Abandoned
        self.stopping = threading.Event()
        self.waiting: dict[tuple, tuple] = {}  # (key, sample, turn) -> (chain, completion, meta)
        self.recorded = {(r.key, r.sample, r.turn): r for r in writer.file.samples}
        self.counts: Counter = Counter()
        self.open_chains = 0
        self.bar = None

    # ---------------------------------------------------------------- driving
    def run(self, problems: list) -> None:
        from tqdm import tqdm

        from kb_eval.inference.prompts import build_prompt

        chains = [Chain(p, s, build_prompt(p.code, self.ctx.backend, self.ctx.config.precision,
                                           self.args.prompt, self.ctx.hardware))
                  for p in problems for s in range(self.args.samples)
                  if (p.key, s, self.args.turns - 1) not in self.recorded]
        todo = sum(1 for c in chains for t in range(self.args.turns)
                   if (c.problem.key, c.sample, t) not in self.recorded)
        for r in self.writer.file.samples:
            self._count(r)
        print(f"{self.model.name}: {len(problems)} problem(s) x {self.args.samples} sample(s) "
              f"x {self.args.turns} turn(s) on {self.ctx.hardware.name} [{self.ctx.backend}, "
              f"{self.ctx.config.precision}]: {todo} to do, {len(self.recorded)} already "
              f"recorded -> {self.writer.path}", flush=True)
        if not chains:
            return
        # Daemon threads: a request in flight must not hold up exit after Ctrl-C.
        evaluator = threading.Thread(target=self._evaluate, daemon=True, name="kb-run-eval")
        askers = [threading.Thread(target=self._ask_loop, daemon=True, name=f"kb-run-ask-{i}")
                  for i in range(self.concurrency)]
        for t in [evaluator, *askers]:
            t.start()
        self.open_chains = len(chains)
        self.bar = tqdm(total=todo, unit="sample", dynamic_ncols=True)
        finished = False
        try:
            for chain in chains:
                self.asks.put(chain)
            while self.open_chains:
                self._handle(*self.events.get())
            finished = True
        finally:
            self.bar.close()
            self.stopping.set()
            for _ in askers:
                self.asks.put(None)
            # None: evaluate() returns once nothing is pending; Abandoned: it kills its
            # running children and returns at once.
            self.eval_q.put(None if finished else Abandoned())
            evaluator.join(timeout=None if finished else 60)

    def _ask_loop(self) -> None:
        """An inference thread: one request (or cache hit) at a time."""
        from kb_eval.inference.client import InferenceError

        while (chain := self.asks.get()) is not None:
            if self.stopping.is_set():
                return
            try:
                completion = self.model.generate(chain.messages, chain.sample, turn=chain.turn,
                                                 problem_key=chain.problem.key)
                self.events.put(("answer", chain, completion))
            except InferenceError as e:
                self.events.put(("no_answer", chain, e))
            except BaseException as e:  # noqa: BLE001 - UserError (bad key...) or a bug: stop
                self.events.put(("fatal", e))

    def _pairs(self):
        while (item := self.eval_q.get()) is not None:
            if isinstance(item, Abandoned):
                raise item
            yield item

    def _evaluate(self) -> None:
        from kb_eval.eval import evaluate

        try:
            for record in evaluate(self._pairs(), context=self.ctx):
                self.events.put(("record", record))
        except Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised by the main thread
            self.events.put(("fatal", e))

    # ---------------------------------------------------------------- main thread
    def _handle(self, kind: str, *rest) -> None:
        if kind == "fatal":
            raise rest[0]
        if kind == "answer":
            self._on_answer(*rest)
        elif kind == "no_answer":
            chain, error = rest
            record = self._bare_record(chain, "inference_error", str(error), None)
            record.attempts = getattr(error, "attempts", None)
            self._on_record(chain, record, None, new=True)
        elif kind == "record":
            record = rest[0]
            chain, completion, meta = self.waiting.pop((record.key, record.sample, record.turn))
            for field, value in meta.items():
                setattr(record, field, value)
            self._on_record(chain, record, completion, new=True)

    def _on_answer(self, chain: Chain, completion) -> None:
        from kb_eval.inference.extract import extract_code

        slot = (chain.problem.key, chain.sample, chain.turn)
        if slot in self.recorded:  # resumed: replaying the history up to the missing turn
            self._on_record(chain, self.recorded[slot], completion, new=False)
            return
        self.counts["answered"] += 1
        extraction = extract_code(completion.text)
        meta = self._meta(chain, completion, extraction.code)
        if extraction.ok:
            self.waiting[slot] = (chain, completion, meta)
            self.eval_q.put((chain.problem, chain.sample, extraction.code, chain.turn))
            return
        record = self._bare_record(chain, extraction.outcome, extraction.message, extraction.code)
        for field, value in meta.items():
            setattr(record, field, value)
        self._on_record(chain, record, completion, new=True)

    def _on_record(self, chain: Chain, record, completion, *, new: bool) -> None:
        from kb_eval.eval import feedback_fields
        from kb_eval.inference.prompts import build_feedback, next_turn_messages

        if new:
            self.writer.add(record)
            self._count(record)
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update()
        if completion is None or chain.turn + 1 >= self.args.turns:
            if chain.turn + 1 < self.args.turns:  # no answer to refine: the chain ends here
                self.bar.total -= self.args.turns - chain.turn - 1
                self.bar.refresh()
            self.open_chains -= 1
            return
        feedback = build_feedback(feedback_fields(record))
        chain.messages = next_turn_messages(chain.messages, completion.text, feedback)
        chain.turn += 1
        self.asks.put(chain)

    # ---------------------------------------------------------------- records
    def _meta(self, chain: Chain, completion, code: str | None) -> dict:
        code_path = None
        if code is not None:
            rel = Path("code") / (f"{chain.problem.slug}_sample{chain.sample}"
                                  f"_turn{chain.turn}.py")
            (self.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.run_dir / rel).write_text(code, encoding="utf-8")
            code_path = rel.as_posix()
        return {"model": self.model.name, "code_path": code_path,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "cost": completion.cost, "latency_s": round(completion.latency_s, 3),
                "response_cached": completion.cached, "finish_reason": completion.finish_reason,
                "attempts": completion.attempts}

    def _bare_record(self, chain: Chain, status: str, error: str, code: str | None):
        """The record of an answer that is not evaluated (no usable code, or no answer)."""
        import hashlib

        from kb_eval.results import SampleRecord

        p = chain.problem
        return SampleRecord(key=p.key, sample=chain.sample, turn=chain.turn, source=p.source,
                            level=p.level, problem_id=p.problem_id, name=p.name,
                            backend=self.ctx.backend, precision=self.ctx.config.precision,
                            source_sha256=hashlib.sha256(code.encode()).hexdigest() if code
                            else "", status=status, error=error.splitlines()[0][:300]
                            if error else status, detail=error if error and "\n" in error
                            else None)

    def _count(self, record) -> None:
        from kb_eval.eval.judge.score import is_correct, is_fast

        self.counts["compiled"] += bool(record.compiled)
        self.counts["correct"] += is_correct(record)
        self.counts["fast_1"] += is_fast(record, 1.0)

    def _postfix(self) -> str:
        c = self.counts
        return (f"answered {c['answered']} compiled {c['compiled']} correct {c['correct']} "
                f"fast_1 {c['fast_1']}")


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
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
    live_asked = bool(args.live_baseline)
    fill_flags(args, defaults, stored.get("run_args", {}) if stored else {})
    if stored.get("baseline") == "live":
        args.live_baseline = True
    check_numbers(args)
    if endpoint is not None and args.samples > 1 and not endpoint.reasoning \
            and not endpoint.temperature:
        print(f"note: {endpoint.name} samples at temperature {endpoint.temperature}: its "
              f"{args.samples} samples per problem may be identical (set temperature in "
              f"config.py for a meaningful pass@k)")
    return execute(args, settings, endpoint, run, run_dir, stored, live_asked)


def answerable(model, problems: list, precision: str) -> list:
    """The offline reference model is asked only what it has solutions for (a missing
    solution is a gap in our collection, not a model's failure to score)."""
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


def execute(args, settings, endpoint, run: str, run_dir: Path, stored: dict,
            live_asked: bool) -> int:
    import torch

    from kb_eval.inference.models import get_model
    from kb_eval.problems import load_problems
    from kb_eval.report import samples_table, summary_table
    from kb_eval.results import Producer

    problems = load_problems(args.source, args.level, args.problems, args.name)
    config = eval_config(args, settings.defaults, torch.cuda.is_available())
    model = get_model(args.model, settings.models, backend=config.backend,
                      cache_dir=run_dir / "responses", precision=args.precision)
    if endpoint is None:
        problems = answerable(model, problems, args.precision)
    ctx = prepare_context(config, problems, stored, live_asked)
    writer = make_writer(run_dir / "results.json", ctx, name=model.name, run=run,
                         source=args.source, problems_asked=[p.key for p in problems],
                         samples_per_problem=args.samples, resume=args.resume)
    # Failed requests are asked again on resume: drop their records.
    writer.file.samples = [r for r in writer.file.samples if r.status != "inference_error"]
    writer.file.produced_by = Producer(tool="kb_eval.run")
    writer.file.run_args = {flag: getattr(args, flag) for flag in RESUMED_FLAGS}
    writer.file.model = ({"name": endpoint.name, "endpoint": endpoint.base_url,
                          "model": endpoint.model, "params": endpoint.request_params()}
                         if endpoint else {"name": model.name, "endpoint": None})
    writer.save()
    started = time.monotonic()
    concurrency = endpoint.max_concurrency if endpoint else REFERENCE_CONCURRENCY
    Runner(model, ctx, writer, run_dir, args, concurrency).run(problems)
    writer.save()
    table = samples_table(writer.file)
    if table:
        print(table)
    print(summary_table(writer.file))
    print(f"{time.monotonic() - started:.0f} s; results: {writer.path}")
    return 0


def entry(argv: list[str] | None = None) -> int:
    import signal

    def terminate(signum, frame):  # `kill`: stop like Ctrl-C (children killed, file saved)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(entry())
