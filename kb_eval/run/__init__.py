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

Modules: flags (the command line and the EvalConfig it makes), prepare (problems, eval
context, results file), runner (the threads and the main thread's loop), feedback (the
turns of a sample), records (what the run adds to each record), command (main, entry).
"""

from kb_eval.run.command import entry, main

__all__ = ["entry", "main"]
