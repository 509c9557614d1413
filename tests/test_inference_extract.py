"""extract_code: the final complete block defining ModelNew, and each failure outcome."""

from __future__ import annotations

from kb_eval.inference.extract import extract_code, fenced_blocks

DRAFT = "import torch\n\nclass ModelNew:\n    draft = True\n"
FINAL = "import torch\n\nclass ModelNew:\n    final = True\n"


def test_takes_the_last_block_defining_model_new() -> None:
    text = (f"First a draft:\n```python\n{DRAFT}```\nA helper:\n```cpp\nint f();\n```\n"
            f"Fixed version:\n```python\n{FINAL}```\nUsage:\n```python\nm = ModelNew()\n```\n")
    result = extract_code(text)
    assert result.ok and result.code == FINAL
    assert "block 3 of 4" in result.message


def test_no_code() -> None:
    result = extract_code("I cannot help with that.")
    assert result.outcome == "no_code" and result.code is None


def test_unclosed_block_is_not_code() -> None:
    result = extract_code(f"```python\n{FINAL}")  # cut off at max_tokens
    assert result.outcome == "no_code" and "unclosed" in result.message


def test_blocks_without_model_new() -> None:
    result = extract_code("```python\nclass Model:\n    pass\n```\n```\nprint(1)\n```")
    assert result.outcome == "no_model_new" and "2 code block" in result.message


def test_model_new_only_inside_a_string() -> None:
    result = extract_code('```python\nsource = """\nclass ModelNew: pass\n"""\n```')
    assert result.outcome == "no_model_new" and "top level" in result.message


def test_syntax_error_in_final_block_is_reported_not_the_draft() -> None:
    broken = "class ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n"
    result = extract_code(f"```python\n{DRAFT}```\nbetter:\n```python\n{broken}```")
    assert result.outcome == "syntax_error" and result.code == broken
    assert "line 2" in result.message


def test_unfenced_python_answer_is_accepted() -> None:
    assert extract_code(FINAL).ok
    assert extract_code("Here:\n" + FINAL).outcome == "no_code"


def test_fence_variants() -> None:
    blocks, unclosed = fenced_blocks("~~~py\na = 1\n~~~\n````\nb = '```'\n```\n````\n")
    assert blocks == ["a = 1\n", "b = '```'\n```\n"] and not unclosed
    indented = extract_code("1. the code:\n  ```Python\n  class ModelNew:\n      pass\n  ```")
    assert indented.ok and indented.code == "class ModelNew:\n    pass\n"
