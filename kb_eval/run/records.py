"""What the run adds to the eval records: each answer's inference facts, and the records
of answers that are never evaluated (no usable code, or no answer)."""

from __future__ import annotations

from pathlib import Path


def answer_meta(run_dir: Path, model_name: str, chain, completion, code: str | None) -> dict:
    """The record fields that come from the answer; the code is saved under code/ so that
    every record can be looked at (and rerun) later."""
    code_path = None
    if code is not None:
        rel = Path("code") / (f"{chain.problem.slug}_sample{chain.sample}"
                              f"_turn{chain.turn}.py")
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text(code, encoding="utf-8")
        code_path = rel.as_posix()
    return {"model": model_name, "code_path": code_path,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "cost": completion.cost, "latency_s": round(completion.latency_s, 3),
            "response_cached": completion.cached, "finish_reason": completion.finish_reason,
            "attempts": completion.attempts}


def apply_meta(record, meta: dict) -> None:
    """Join the answer's facts to a record (an evaluated one comes back without them)."""
    for field, value in meta.items():
        setattr(record, field, value)


def bare_record(chain, ctx, status: str, error: str, code: str | None):
    """The record of an answer that is not evaluated (no usable code, or no answer)."""
    import hashlib

    from kb_eval.results import SampleRecord

    p = chain.problem
    return SampleRecord(key=p.key, sample=chain.sample, turn=chain.turn, source=p.source,
                        level=p.level, problem_id=p.problem_id, name=p.name,
                        backend=ctx.backend, precision=ctx.config.precision,
                        source_sha256=hashlib.sha256(code.encode()).hexdigest() if code
                        else "", status=status, error=error.splitlines()[0][:300]
                        if error else status, detail=error if error and "\n" in error
                        else None)
