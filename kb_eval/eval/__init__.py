"""Evaluation stage: build (compile + cache), run (isolated children), check, time, score.

    from kb_eval.eval import EvalConfig, evaluate
    for record in evaluate(pairs, EvalConfig(backend="cuda")): ...

Modules: config (EvalConfig), context (secret, hardware, baseline), build (compile cache,
build child), worker (candidate and reference children), correctness (compare in the
parent), guards (rules beyond numbers), references (reference outputs cache), sample (one
sample end to end), pool (CPU builds, per-device evaluation), score (rates, fast_p,
pass@k), api (evaluate, RunWriter), candidates + cli (python -m kb_eval.eval).
"""

from kb_eval.eval.api import RunWriter, evaluate, feedback_fields, iter_queue, prepare
from kb_eval.eval.config import EvalConfig

__all__ = ["EvalConfig", "RunWriter", "evaluate", "feedback_fields", "iter_queue", "prepare"]
