"""benchmarks/corpus/make_corpus.py: the throughput corpus has issue 59's shapes (counted
over the written files, as over the model-written ones), every file parses and has an
expected verdict, and no two files are the same source (each builds on its own)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO.parent / "shared" / "kernelbench", REPO / "shared" / "kernelbench",
           REPO.parents[1] / "shared" / "kernelbench"]
SOURCE = next((s for s in SOURCES if (s / "level3").is_dir()), None)

SHAPES = {"load_inline": 72, "at_import": 38, "in_init": 29, "in_forward": 7,
          "no_custom_kernel": 138, "cuda_available": 94, "extra_cuda_cflags": 35,
          "fast_math": 24, "cuda_graphs": 27, "jit": 24, "cudnn_benchmark": 50,
          "allow_tf32": 24, "torch_compile": 8}


def _load_inline_places(tree: ast.Module) -> set[str]:
    """Where a file calls load_inline: "import" (module level), or the function's name."""
    places = set()
    for node in tree.body:
        funcs = [node] if isinstance(node, ast.FunctionDef) else \
            [n for n in node.body if isinstance(n, ast.FunctionDef)] \
            if isinstance(node, ast.ClassDef) else []
        calls = [(f.name, c) for f in funcs for c in ast.walk(f)]
        if not funcs:
            calls = [("import", c) for c in ast.walk(node)]
        places |= {where for where, c in calls if isinstance(c, ast.Call)
                   and getattr(c.func, "id", None) == "load_inline"}
    return places


def shapes_of(text: str) -> dict[str, bool]:
    places = _load_inline_places(ast.parse(text))
    return {"load_inline": bool(places), "at_import": "import" in places,
            "in_init": "__init__" in places, "in_forward": "forward" in places,
            "no_custom_kernel": not places,
            "cuda_available": "torch.cuda.is_available()" in text,
            "extra_cuda_cflags": "extra_cuda_cflags" in text,
            "fast_math": "--use_fast_math" in text, "cuda_graphs": "torch.cuda.graph(" in text,
            "jit": bool(re.search(r"torch\.jit\.(script|trace)", text)),
            "cudnn_benchmark": "cudnn.benchmark = True" in text,
            "allow_tf32": "allow_tf32" in text, "torch_compile": "torch.compile(" in text}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    if SOURCE is None:
        pytest.skip("no KernelBench problems beside the checkout (../shared/kernelbench)")
    out = tmp_path_factory.mktemp("corpus")
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "corpus" / "make_corpus.py"),
                    str(out), "--source", str(SOURCE)], check=True, capture_output=True)
    return out


def test_corpus_has_the_shapes_of_model_written_kernels(corpus):
    files = sorted(corpus.glob("level*_problem*_sample*.py"))
    assert len(files) >= 200
    assert {f.name[:6] for f in files} == {"level1", "level2", "level3"}
    counts = dict.fromkeys(SHAPES, 0)
    for f in files:
        for shape, present in shapes_of(f.read_text()).items():
            counts[shape] += present
    assert counts == SHAPES


def test_every_candidate_parses_is_distinct_and_has_a_verdict(corpus):
    files = sorted(corpus.glob("level*_problem*_sample*.py"))
    texts = [f.read_text() for f in files]
    for f, text in zip(files, texts):
        tree = ast.parse(text, filename=f.name)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body), f
    assert len(set(texts)) == len(texts)
    expected = json.loads((corpus / "expected.json").read_text())
    assert set(expected) == {f.name for f in files}
    verdicts = [e["verdict"] for e in expected.values()]
    assert set(verdicts) == {"correct", "incorrect", "error"}
    assert sum(e["slow"] for e in expected.values()) >= 5
