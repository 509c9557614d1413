"""Evaluation stage: build (compile + cache), run (isolated children), check, time, score.

    from kb_eval.eval import EvalConfig, evaluate
    for record in evaluate(pairs, EvalConfig(backend="cuda")): ...

The tree shows the trust boundary:
  child/     runs inside a candidate's processes: the run child's worker, its per-call
             probes and observations, the tripwires; the build child's build_task and
             first_call_task (imports nothing from judge/ or schedule/)
  judge/     trusted: the reference server and its client, correctness, guards, rules,
             static checks, crash naming, scores (never imports candidate code)
  wire/      what both agree on: label names and raw output files (plain data)
  schedule/  the main process's scheduling: builds and their cache, the compiler fronts,
             one lane per device, one sample end to end, the escapee sweep, the context
  config (EvalConfig), api (evaluate, RunWriter), candidates + cli (python -m kb_eval.eval).
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
