"""Prompts: the words live in templates/ (string.Template files); this module fills them.

    messages = build_prompt(problem_code, backend, precision, style, device_info)
        backend: cuda | triton | cpp;  precision: fp32 | fp16 | bf16
        style: zero_shot | one_shot | few_shot (0, 1 or 2 worked examples from
               templates/examples/: problems/<name>.py and <backend>/<name>.py)
        device_info: DeviceInfo, a dict of its fields, a results HardwareInfo, or None
                     (detect this machine's device for the backend)
        -> [{"role": "system", ...}, {"role": "user", ...}]
    feedback = build_feedback(turn_result)      # the next user message of a refinement
    messages = next_turn_messages(messages, completion.text, feedback)

`turn_result.outcome` picks the feedback template. Only the answer text goes back into the
history, never the reasoning (DeepSeek refuses reasoning_content in requests).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict

from kb_eval.errors import UserError
from kb_eval.inference.device import DeviceInfo, detect_device_info, from_hardware
from kb_eval.inputs import TOLERANCES
from kb_eval.results import HardwareInfo

TEMPLATES = Path(__file__).parent / "templates"
BACKENDS = {"cuda": "CUDA", "triton": "Triton", "cpp": "C++ (CPU)"}
STYLES = {"zero_shot": 0, "one_shot": 1, "few_shot": 2}
EXAMPLES = [("bias_relu", "a fused elementwise operation"),
            ("softmax_rows", "a row-wise reduction")]
PRECISION_NOTES = {
    "fp32": "fp32: inputs, parameters and outputs are torch.float32. The reference runs with "
            "TF32 disabled, so keep fp32 accuracy in matmuls and convolutions (no TF32 or "
            "half-precision shortcuts that break the tolerance).",
    "fp16": "fp16: inputs, parameters and outputs are torch.float16 (the evaluator casts "
            "`Model`, `ModelNew` and the inputs). Accumulate sums and dot products in fp32.",
    "bf16": "bf16: inputs, parameters and outputs are torch.bfloat16 (the evaluator casts "
            "`Model`, `ModelNew` and the inputs). Accumulate sums and dot products in fp32.",
}
DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}
EXTRACT_OUTCOMES = {"no_code", "no_model_new", "syntax_error"}
LOG_MAX_CHARS = 3000


class TurnResult(BaseModel):
    """What the evaluation of one turn's answer says, as fed back to the model."""
    model_config = ConfigDict(extra="ignore")

    outcome: str
    message: str = ""
    log: str = ""
    # A mismatch: the largest differences, and how many correctness trials failed
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    trials_failed: int | None = None  # of `trials`
    trials: int | None = None
    # A correct answer: milliseconds per call, the candidate's and the reference's
    candidate_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None  # baseline_ms / candidate_ms when not given


@lru_cache(maxsize=None)
def _read(relative: str) -> str:
    return (TEMPLATES / relative).read_text(encoding="utf-8")


def render(template_name: str, **values: Any) -> str:
    """Fill a template; a placeholder without a value is a KeyError (a bug of ours)."""
    return Template(_read(template_name)).substitute({k: str(v) for k, v in values.items()})


def build_prompt(problem_code: str, backend: str, precision: str, style: str,
                 device_info: DeviceInfo | HardwareInfo | Mapping[str, Any] | None = None,
                 ) -> list[dict[str, str]]:
    _check_choice("backend", backend, BACKENDS)
    _check_choice("precision", precision, PRECISION_NOTES)
    _check_choice("prompt style", style, STYLES)
    info = _device(device_info, backend)
    atol, rtol = TOLERANCES[precision]
    common = {"backend_title": BACKENDS[backend], "dtype": DTYPES[precision],
              "compute_capability": _or_unknown(info.compute_capability),
              "arch": _arch(info.compute_capability)}
    user = render("task.md", **common,
                  device_specs=describe_device(info).strip(),
                  precision_note=PRECISION_NOTES[precision],
                  backend_rules=render(f"backend_{backend}.md", **common).strip(),
                  atol=atol, rtol=rtol,
                  examples=_examples(backend, STYLES[style]),
                  reference_source=problem_code.strip(),
                  parallel_units="threads and vector lanes" if backend == "cpp"
                  else "thread blocks, warps and threads")
    return [{"role": "system", "content": render("system.md", **common).strip()},
            {"role": "user", "content": user.strip()}]


def describe_device(info: DeviceInfo) -> str:
    if info.kind == "cpu":
        return render("device_cpu.md", name=info.name, cores=_or_unknown(info.cores),
                      isa=_or_unknown(info.isa))
    return render("device_gpu.md", name=info.name,
                  compute_capability=_or_unknown(info.compute_capability),
                  sm_count=_or_unknown(info.sm_count), memory_gb=_or_unknown(info.memory_gb),
                  mem_bandwidth=_with_unit(info.mem_bandwidth_gbps, "GB/s"),
                  l2=_with_unit(info.l2_mb, "MB"))


def build_feedback(turn_result: TurnResult | Mapping[str, Any]) -> str:
    r = TurnResult.model_validate(turn_result)
    message = r.message.strip().rstrip(".")
    if r.outcome in EXTRACT_OUTCOMES:
        text = render("feedback_extract.md", message=message or r.outcome.replace("_", " "))
    elif r.outcome == "compile_error":
        text = render("feedback_compile.md", message=_sentence(message, "build error"),
                      log=trim_log(r.log) or "(no log)")
    elif r.outcome == "mismatch":
        text = render("feedback_mismatch.md", mismatch_summary=_mismatch_summary(r))
    elif r.outcome == "correct":
        text = render("feedback_correct.md", timing_summary=_timing_summary(r))
    else:
        text = render("feedback_runtime.md", message=_sentence(message, r.outcome),
                      log=trim_log(r.log) or "(no log)")
    return text.strip()


def next_turn_messages(messages: list[dict[str, str]], answer_text: str,
                       feedback: str) -> list[dict[str, str]]:
    """The conversation for the next turn: the answer (never its reasoning), then feedback."""
    return [*messages, {"role": "assistant", "content": answer_text},
            {"role": "user", "content": feedback}]


_ERROR_LINE = re.compile(r"error|undefined reference|fatal|Traceback|Exception", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def trim_log(log: str, max_chars: int = LOG_MAX_CHARS, context: int = 2) -> str:
    """A long build/run log cut to its error lines (with `context` lines around each);
    without error lines, its head and tail. Never longer than about `max_chars`."""
    log = _ANSI.sub("", log or "").strip()
    if len(log) <= max_chars:
        return log
    lines = log.splitlines()
    hits = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    if not hits:
        head, tail = log[: max_chars // 3], log[-(2 * max_chars) // 3:]
        return f"{head}\n[... {len(log) - len(head) - len(tail)} characters cut ...]\n{tail}"
    keep: list[str] = []
    used, last = 0, -1
    for i in hits:
        for j in range(max(i - context, last + 1), min(i + context + 1, len(lines))):
            line = lines[j][:max_chars // 2]  # one huge line must not eat the budget
            piece = line if j == last + 1 else f"[...]\n{line}"
            if used + len(piece) > max_chars:
                keep.append(f"[... {len(hits)} error lines in all, the rest cut ...]")
                return "\n".join(keep)
            keep.append(piece)
            used += len(piece) + 1
            last = j
    return "\n".join(keep)


def _examples(backend: str, count: int) -> str:
    parts = []
    for number, (name, title) in enumerate(EXAMPLES[:count], start=1):
        parts.append(render("example.md", example_number=number, example_title=title,
                            example_problem=_read(f"examples/problems/{name}.py").strip(),
                            example_solution=_read(f"examples/{backend}/{name}.py").strip()))
    return "".join(parts)


def _device(device_info: DeviceInfo | HardwareInfo | Mapping[str, Any] | None,
            backend: str) -> DeviceInfo:
    if device_info is None:
        return detect_device_info(backend)
    if isinstance(device_info, HardwareInfo):
        return from_hardware(device_info)
    return DeviceInfo.model_validate(device_info)


def _mismatch_summary(r: TurnResult) -> str:
    parts = [r.message.strip().rstrip(".")] if r.message.strip() else []
    if r.trials_failed is not None and r.trials is not None:
        parts.append(f"{r.trials_failed} of {r.trials} trials gave wrong outputs")
    if r.max_abs_diff is not None:
        parts.append(f"max absolute difference {r.max_abs_diff:.4g}")
    if r.max_rel_diff is not None:
        parts.append(f"max relative difference {r.max_rel_diff:.4g}")
    return ("; ".join(parts) or "the outputs differ") + "."


def _timing_summary(r: TurnResult) -> str:
    if r.candidate_ms is None:
        return "Its timing is not available."
    text = f"It takes {r.candidate_ms:.4g} ms per call"
    if r.baseline_ms is not None:
        text += f", the PyTorch reference {r.baseline_ms:.4g} ms"
    speedup = r.speedup
    if speedup is None and r.baseline_ms is not None and r.candidate_ms > 0:
        speedup = r.baseline_ms / r.candidate_ms
    if speedup is not None:
        text += f": a {speedup:.2f}x speedup"
        if speedup < 1:
            text += " (slower than the reference)"
    return text + "."


def _sentence(message: str, fallback: str) -> str:
    return (message or fallback.replace("_", " ")) + "."


def _or_unknown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _with_unit(value: float | None, unit: str) -> str:
    return "unknown" if value is None else f"{value:g} {unit}"


def _arch(compute_capability: str | None) -> str:
    return f"sm_{compute_capability.replace('.', '')}" if compute_capability else "its architecture"


def _check_choice(what: str, value: str, choices: Mapping[str, Any]) -> None:
    if value not in choices:
        raise UserError(f"unknown {what} {value!r}: use one of {', '.join(choices)}")
