"""Shared test setup: `gpu` tests skip cleanly without CUDA; one build cache for the whole
session so each distinct C++/CUDA source compiles once (compiles cost ~23 s here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def build_cache_dir() -> Path:
    """Persistent across runs on one machine (CI starts from a fresh clone: empty)."""
    path = Path(os.environ.get("KB_EVAL_TEST_CACHE", REPO / ".cache" / "test-builds"))
    path.mkdir(parents=True, exist_ok=True)
    return path
