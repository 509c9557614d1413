"""Prompt templates render fully for every backend x style x precision; feedback for
every outcome; long logs are trimmed to their errors."""

from __future__ import annotations

import re

import pytest

from kb_eval.errors import UserError
from kb_eval.inference.device import DeviceInfo
from kb_eval.inference.extract import extract_code
from kb_eval.inference.prompts import (BACKENDS, PRECISION_NOTES, STYLES, TEMPLATES,
                                       build_feedback, build_prompt, next_turn_messages,
                                       trim_log)

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)  # costs $0 {not a placeholder}

def get_inputs():
    return [torch.randn(1024, 1024)]

def get_init_inputs():
    return []
"""
GPU = DeviceInfo(kind="gpu", name="NVIDIA H200", sm_count=132, memory_gb=139.8,
                 mem_bandwidth_gbps=4800, l2_mb=60, compute_capability="9.0")
CPU = DeviceInfo(kind="cpu", name="Test Xeon", cores=16, isa="avx2 avx512f")
LEFTOVER = re.compile(r"\$\{?[A-Za-z_]")


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("precision", list(PRECISION_NOTES))
def test_prompt_renders_completely(backend: str, style: str, precision: str) -> None:
    device = CPU if backend == "cpp" else GPU
    system, user = build_prompt(PROBLEM, backend, precision, style, device)
    assert (system["role"], user["role"]) == ("system", "user")
    text = system["content"] + user["content"]
    assert not LEFTOVER.search(text.replace("$0", "")), LEFTOVER.search(text)
    assert PROBLEM.strip() in user["content"]
    dtype = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16"}
    assert dtype[precision] in text
    assert "unknown" not in user["content"]
    if backend == "cpp":
        assert "Test Xeon" in text and "16 cores" in text and "avx512f" in text
    else:
        for spec in ("NVIDIA H200", "132 SMs", "4800 GB/s", "60 MB L2", "9.0"):
            assert spec in text
    assert user["content"].count("## Example") == STYLES[style]
    if STYLES[style]:  # the worked examples are this backend's own
        marker = {"cuda": "cuda_sources=", "triton": "@triton.jit", "cpp": "at::parallel_for"}
        assert marker[backend] in user["content"]


def test_example_files_exist_and_parse() -> None:
    for backend in BACKENDS:
        for path in (TEMPLATES / "examples" / backend).glob("*.py"):
            assert extract_code(f"```python\n{path.read_text()}```").ok, path
            assert (TEMPLATES / "examples" / "problems" / path.name).is_file()


def test_unknown_device_fields_read_unknown() -> None:
    _, user = build_prompt(PROBLEM, "cuda", "fp32", "zero_shot", {"kind": "gpu", "name": "X"})
    assert "unknown" in user["content"] and not LEFTOVER.search(user["content"].replace("$0", ""))


def test_bad_choices_are_user_errors() -> None:
    with pytest.raises(UserError, match="backend"):
        build_prompt(PROBLEM, "opencl", "fp32", "zero_shot", GPU)
    with pytest.raises(UserError, match="prompt style"):
        build_prompt(PROBLEM, "cuda", "fp32", "two_shot", GPU)


@pytest.mark.parametrize("result, expected", [
    ({"outcome": "no_code", "message": "no complete fenced code block in the answer"},
     ["could not be evaluated", "fenced code block"]),
    ({"outcome": "syntax_error", "message": "syntax error in code block 1 of 1: line 3: x"},
     ["line 3"]),
    ({"outcome": "compile_error", "message": "nvcc failed",
      "log": "kernel.cu(12): error: identifier \"foo\" is undefined"},
     ["failed to build", "nvcc failed", "identifier \"foo\""]),
    ({"outcome": "runtime_error", "message": "CUDA error: an illegal memory access",
      "log": "Traceback ...\nRuntimeError: CUDA error"}, ["failed when run", "illegal memory"]),
    ({"outcome": "timeout", "message": ""}, ["failed when run: timeout."]),
    ({"outcome": "mismatch", "message": "output 0 differs", "max_abs_diff": 0.3125,
      "trials_failed": 3, "trials": 5}, ["3 of 5 trials", "0.3125", "output 0 differs"]),
    ({"outcome": "correct", "candidate_ms": 0.5, "baseline_ms": 1.0},
     ["is correct", "0.5 ms", "1 ms", "2.00x speedup"]),
    ({"outcome": "correct", "candidate_ms": 2.0, "baseline_ms": 1.0, "speedup": 0.5,
      "extra_field": "ignored"}, ["0.50x speedup (slower than the reference)"]),
])
def test_feedback(result: dict, expected: list[str]) -> None:
    text = build_feedback(result)
    for words in expected:
        assert words in text
    assert "```python" in text and not LEFTOVER.search(text)


def test_trim_log_keeps_errors() -> None:
    noise = [f"[{i}/80] c++ -O3 -I/usr/include/some/long/path file{i}.cpp" for i in range(200)]
    lines = noise[:100] + ["kernel.cu(7): error: expected a \";\""] + noise[100:]
    trimmed = trim_log("\n".join(lines), max_chars=600)
    assert 'error: expected a ";"' in trimmed and len(trimmed) <= 700
    assert "[...]" in trimmed
    assert trim_log("short log") == "short log"
    no_errors = trim_log("x" * 5000, max_chars=300)
    assert "characters cut" in no_errors and len(no_errors) < 400


def test_next_turn_keeps_reasoning_out() -> None:
    messages = build_prompt(PROBLEM, "cpp", "fp32", "zero_shot", CPU)
    history = next_turn_messages(messages, "answer text", "feedback text")
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    assert history[2] == {"role": "assistant", "content": "answer text"}
    assert messages[-1]["role"] == "user" and len(messages) == 2  # input left untouched
