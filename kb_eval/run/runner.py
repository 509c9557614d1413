"""The runner loop: inference threads ask the model, one thread feeds kb_eval.eval.evaluate,
and the main thread reacts to their events (kb_eval.run has the picture).

Only the main thread touches state, so the run needs no locks beyond the queues and a
Ctrl-C stops everything in one place."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from pathlib import Path

from kb_eval.run.feedback import Chain, first_turns, next_turn
from kb_eval.run.records import answer_meta, apply_meta, bare_record


class Abandoned(Exception):
    """Raised into evaluate()'s intake so that it kills its children and returns."""


class Runner:
    """One run's threads and the main thread's state; `run` drives it to the end."""

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
        """Ask and evaluate every chain still to do; returns when each has ended, or raises
        what stopped the run once the threads were told to stop."""
        from kb_eval.progress import progress_bar

        chains, todo = first_turns(problems, self.args, self.ctx, self.recorded)
        print(f"{self.model.name}: {len(problems)} problem(s) x {self.args.samples} sample(s) "
              f"x {self.args.turns} turn(s) on {self.ctx.hardware.name} [{self.ctx.backend}, "
              f"{self.ctx.config.precision}]: {todo} to do, {len(self.recorded)} already "
              f"recorded -> {self.writer.path}", flush=True)
        if not chains:
            return
        evaluator, askers = self._start_threads()
        self.open_chains = len(chains)
        self.bar = progress_bar(todo, bool(getattr(self.args, "quiet", False)))
        finished = False
        try:
            for chain in chains:
                self.asks.put(chain)
            while self.open_chains:
                self._handle(*self.events.get())
            finished = True
        finally:
            self._stop_threads(evaluator, askers, finished)

    def _start_threads(self) -> tuple[threading.Thread, list[threading.Thread]]:
        """The eval thread and `concurrency` inference threads."""
        # Daemon threads: a request in flight must not hold up exit after Ctrl-C.
        evaluator = threading.Thread(target=self._evaluate, daemon=True, name="kb-run-eval")
        askers = [threading.Thread(target=self._ask_loop, daemon=True, name=f"kb-run-ask-{i}")
                  for i in range(self.concurrency)]
        for t in [evaluator, *askers]:
            t.start()
        return evaluator, askers

    def _stop_threads(self, evaluator: threading.Thread, askers: list, finished: bool) -> None:
        """Tell every thread to stop; unless `finished`, running children are killed."""
        self.bar.close()
        self.stopping.set()
        for _ in askers:
            self.asks.put(None)
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
        """evaluate()'s intake: what the main thread queues, until None (all done) or
        Abandoned (stop now)."""
        while (item := self.eval_q.get()) is not None:
            if isinstance(item, Abandoned):
                raise item
            yield item

    def _evaluate(self) -> None:
        """The eval thread: records go back to the main thread as events."""
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
        """One event from a thread; "fatal" re-raises here, so that the run stops."""
        if kind == "fatal":
            raise rest[0]
        if kind == "answer":
            self._on_answer(*rest)
        elif kind == "no_answer":
            chain, error = rest
            record = bare_record(chain, self.ctx, "inference_error", str(error), None)
            record.attempts = getattr(error, "attempts", None)
            self._on_record(chain, record, None, new=True)
        elif kind == "record":
            record = rest[0]
            chain, completion, meta = self.waiting.pop((record.key, record.sample, record.turn))
            apply_meta(record, meta)
            self._on_record(chain, record, completion, new=True)

    def _on_answer(self, chain: Chain, completion) -> None:
        """An answer: queue its code for evaluation, or record why it has none."""
        from kb_eval.inference.extract import extract_code

        slot = (chain.problem.key, chain.sample, chain.turn)
        if slot in self.recorded:  # resumed: replaying the history up to the missing turn
            self._on_record(chain, self.recorded[slot], completion, new=False)
            return
        self.counts["answered"] += 1
        extraction = extract_code(completion.text)
        meta = answer_meta(self.run_dir, self.model.name, chain, completion, extraction.code)
        if extraction.ok:
            self.waiting[slot] = (chain, completion, meta)
            self.eval_q.put((chain.problem, chain.sample, extraction.code, chain.turn))
            return
        record = bare_record(chain, self.ctx, extraction.outcome, extraction.message,
                             extraction.code)
        apply_meta(record, meta)
        self._on_record(chain, record, completion, new=True)

    def _on_record(self, chain: Chain, record, completion, *, new: bool) -> None:
        """A turn's record: save it (when `new`), then end the chain or ask its next turn."""
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
        next_turn(chain, record, completion)
        self.asks.put(chain)

    # ---------------------------------------------------------------- progress
    def _count(self, record) -> None:
        """Tally a new record for the progress bar's postfix."""
        from kb_eval.eval.judge.score import is_correct, is_fast

        self.counts["compiled"] += bool(record.compiled)
        self.counts["correct"] += is_correct(record)
        self.counts["fast_1"] += is_fast(record, 1.0)

    def _postfix(self) -> str:
        c = self.counts
        return (f"answered {c['answered']} compiled {c['compiled']} correct {c['correct']} "
                f"fast_1 {c['fast_1']}")
