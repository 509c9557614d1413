"""python -m kb_eval.run: ask one model for kernels, evaluate its answers as they arrive, score.

    python -m kb_eval.run                                  # offline `reference` model, no key
    python -m kb_eval.run --model deepseek-chat --samples 5 --turns 3

How the work flows (threads):

    inference pool (model's max_concurrency) ──(problem, sample, code, turn)──► eval queue
         ▲                                                                          │
         │ next turn: history + answer + feedback           kb_eval.eval.evaluate   │
         │                                                                          ▼
    main thread ◄──── answers ──── records (evaluated, or answers without usable code)

Only the main thread touches state. API answers are cached under responses/, so a rerun
or --resume sends nothing already answered.
"""

from kb_eval.run.command import entry, main

__all__ = ["entry", "main"]
