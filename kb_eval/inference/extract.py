"""Code extraction: the candidate is the LAST complete fenced code block that defines
`class ModelNew` (models often write a draft first and the fixed version last).

    result = extract_code(completion.text)
    result.outcome   # "ok" | "no_code" | "no_model_new" | "syntax_error"
    result.code      # the chosen block (None for no_code/no_model_new)
    result.message   # one line for results and for the next turn's feedback

An unclosed fence (cut off at max_tokens) does not count; an answer with no fences counts
only if it is all Python defining ModelNew. The code is only ast.parse'd here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "no_code", "no_model_new", "syntax_error"]

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


@dataclass(frozen=True)
class Extraction:
    outcome: Outcome
    code: str | None
    message: str

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def fenced_blocks(text: str) -> tuple[list[str], bool]:
    """The complete fenced blocks of `text`, in order, and whether one was left unclosed."""
    blocks: list[str] = []
    fence: str | None = None
    body: list[str] = []
    indent = 0
    for line in text.splitlines():
        if fence is None:
            m = _OPEN.match(line)
            if m:
                fence, body, indent = m.group("fence"), [], m.start("fence")
            continue
        stripped = line.strip()
        if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            blocks.append("\n".join(body) + "\n")
            fence = None
        else:  # as in Markdown, content loses up to the fence's own indentation
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
    return blocks, fence is not None


def extract_code(text: str) -> Extraction:
    blocks, unclosed = fenced_blocks(text or "")
    if not blocks:
        if _MODEL_NEW.search(text or "") and _parses(text):
            return _check(text.strip() + "\n", "the answer (no code fences)")
        hint = (" (a code block was left unclosed: answer cut off at max_tokens?)"
                if unclosed else "")
        return Extraction("no_code", None, f"no complete fenced code block in the answer{hint}")
    candidates = [b for b in blocks if _MODEL_NEW.search(b)]
    if not candidates:
        return Extraction("no_model_new", None,
                          f"none of the {len(blocks)} code block(s) defines class ModelNew")
    where = f"code block {blocks.index(candidates[-1]) + 1} of {len(blocks)}"
    return _check(candidates[-1], where)


def _check(code: str, where: str) -> Extraction:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        line = f"line {e.lineno}: " if e.lineno else ""
        return Extraction("syntax_error", code, f"syntax error in {where}: {line}{e.msg}")
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return Extraction("no_model_new", code,
                          f"{where} does not define class ModelNew at top level")
    return Extraction("ok", code, f"extracted {where}")


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False
