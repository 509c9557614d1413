"""Evaluation stage: build (compile + cache), run (isolated children), check, time, score.

    from kb_eval.eval import EvalConfig, evaluate
    for record in evaluate(pairs, EvalConfig(backend="cuda")): ...

Modules: config (EvalConfig), context (secret, hardware, baseline), build (compile cache,
build child), worker (the candidate's child), outputs (its output files), reference_worker
+ references (the reference server per device, which compares), correctness (the
comparison), guards + rules (checks beyond numbers), sample (one sample end to end), pool
(CPU builds, per-device evaluation), score (rates, fast_p, pass@k), api (evaluate,
RunWriter), candidates + cli (python -m kb_eval.eval).
"""

from typing import Any

__all__ = ["EvalConfig", "RunWriter", "evaluate", "feedback_fields", "iter_queue", "prepare"]


def __getattr__(name: str) -> Any:
    """Imported on first use: children import kb_eval.eval.<module> and should not pay for
    the whole stage (pydantic schemas, the pool) at every start."""
    if name == "EvalConfig":
        from kb_eval.eval.config import EvalConfig
        return EvalConfig
    if name in __all__:
        from kb_eval.eval import api
        return getattr(api, name)
    raise AttributeError(f"module 'kb_eval.eval' has no attribute {name!r}")
