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


@pytest.fixture
def profile_one_step(tmp_path_factory, build_cache_dir, monkeypatch):
    """The config the profile tests read: one recorded forward on the CPU, and the
    session's build cache for the solutions."""
    from candidates.eval_kit import tuned_config

    config = tuned_config(tmp_path_factory.mktemp("config"), profile_cpu_steps=1,
                          cache_dir=build_cache_dir)
    monkeypatch.setenv("KB_EVAL_CONFIG", config["KB_EVAL_CONFIG"])
