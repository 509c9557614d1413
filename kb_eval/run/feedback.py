"""Turns (--turns): a sample is a chain of conversations. Turn 0 is the task prompt; each
later turn adds the model's answer and the feedback from evaluating it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Chain:
    """One sample of one problem, through its turns."""
    problem: object
    sample: int
    messages: list
    turn: int = 0


def first_turns(problems: list, args, ctx, recorded: dict) -> tuple[list[Chain], int]:
    """The chains still to ask, and how many records they have left to make."""
    from kb_eval.inference.prompts import build_prompt

    chains = [Chain(p, s, build_prompt(p.code, ctx.backend, ctx.config.precision,
                                       args.prompt, ctx.hardware))
              for p in problems for s in range(args.samples)
              if (p.key, s, args.turns - 1) not in recorded]
    todo = sum(1 for c in chains for t in range(args.turns)
               if (c.problem.key, c.sample, t) not in recorded)
    return chains, todo


def next_turn(chain: Chain, record, completion) -> None:
    """Append the answer and the feedback on its record to `chain`; advance its turn."""
    from kb_eval.eval import feedback_fields
    from kb_eval.inference.prompts import build_feedback, next_turn_messages

    feedback = build_feedback(feedback_fields(record))
    chain.messages = next_turn_messages(chain.messages, completion.text, feedback)
    chain.turn += 1
