"""Problem loaders and selection: KernelBench-layout folders, a local `datasets` dataset
(built here, no network), bundled suites, and the one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kb_eval.errors import UserError
from kb_eval.problems import load_problems, parse_ids

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """{doc}"""

    def forward(self, x):
        return x * {k}


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''


def write_kernelbench_folder(root: Path) -> Path:
    """KernelBench's own naming: level<N>/<id>_<Name>.py, names with capitals."""
    for level, pid, name in [(1, 1, "Square_matrix_multiplication_"), (1, 2, "ReLU"),
                             (1, 10, "Softmax"), (2, 3, "Conv2d_ReLU_BiasAdd")]:
        d = root / f"level{level}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{pid}_{name}.py").write_text(PROBLEM.format(doc=name, k=pid))
    (root / "level1" / "README.txt").write_text("not a problem")
    return root


def test_folder_loader_reads_kernelbench_layout(tmp_path):
    root = write_kernelbench_folder(tmp_path / "KernelBench")
    problems = load_problems(str(root))
    assert [(p.level, p.problem_id, p.name) for p in problems] == [
        (1, 1, "Square_matrix_multiplication_"), (1, 2, "ReLU"), (1, 10, "Softmax"),
        (2, 3, "Conv2d_ReLU_BiasAdd")]
    assert problems[0].key == "local-KernelBench/level1/1"
    assert "x * 1" in problems[0].code


def test_selection_by_level_ids_and_name(tmp_path):
    root = str(write_kernelbench_folder(tmp_path / "kb"))
    assert [p.problem_id for p in load_problems(root, level=1, ids="1-2,10")] == [1, 2, 10]
    assert [p.name for p in load_problems(root, name="relu")] == ["ReLU", "Conv2d_ReLU_BiasAdd"]
    assert [p.level for p in load_problems(root, level=2)] == [2]


def test_parse_ids():
    assert parse_ids("1-3,7, 9-9") == {1, 2, 3, 7, 9}
    assert parse_ids(None) is None
    for bad in ("1-", "a", "5-2", "1,,2"):
        with pytest.raises(UserError):
            parse_ids(bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(level=7), "level 7 not in"),
    (dict(level=1, ids="1,4"), "problem id(s) 4 not in"),
    (dict(name="nothing-like-this"), "no problem"),
])
def test_bad_selection_is_a_user_error(tmp_path, kwargs, message):
    root = str(write_kernelbench_folder(tmp_path / "kb"))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_problems(root, **kwargs)


def test_missing_folder_and_non_problem_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_problems(str(tmp_path / "missing"))
    bad = tmp_path / "bad" / "level1"
    bad.mkdir(parents=True)
    (bad / "1_NoModel.py").write_text("def get_inputs():\n    return []\n")
    with pytest.raises(UserError, match="lacks Model, get_init_inputs"):
        load_problems(str(tmp_path / "bad"))


def test_unknown_source_name():
    with pytest.raises(UserError, match="unknown problem source"):
        load_problems("no-such-suite")


def test_cli_bad_selection_exits_2_with_one_line(tmp_path):
    root = write_kernelbench_folder(tmp_path / "kb")
    r = subprocess.run([sys.executable, "-m", "kb_eval.baseline", "--source", str(root),
                        "--problems", "99"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: problem id(s) 99 not in {root}"]
    assert "Traceback" not in r.stderr


def _dataset_rows(level: int) -> list[dict]:
    return [dict(code=PROBLEM.format(doc=f"p{i}", k=i), level=level, name=f"{i}_Op{i}.py",
                 problem_id=i) for i in (1, 2, 3)]


def test_hf_loader_from_a_local_dataset_saved_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({f"level_{n}": datasets.Dataset.from_list(_dataset_rows(n))
                               for n in (1, 2)})
    dd.save_to_disk(str(tmp_path / "kb_hf"))
    problems = load_problems(f"hf:{tmp_path / 'kb_hf'}", level=2, ids="2-3")
    assert [(p.source, p.level, p.problem_id, p.name) for p in problems] == [
        ("hf", 2, 2, "Op2"), ("hf", 2, 3, "Op3")]
    assert "x * 3" in problems[1].code
    with pytest.raises(UserError, match="level 4 not in dataset"):
        load_problems(f"hf:{tmp_path / 'kb_hf'}", level=4)


def test_hf_loader_from_parquet_files_laid_out_like_the_hub(tmp_path):
    datasets = pytest.importorskip("datasets")
    (tmp_path / "hub" / "data").mkdir(parents=True)
    for n in (1, 3):
        datasets.Dataset.from_list(_dataset_rows(n)).to_parquet(
            str(tmp_path / "hub" / "data" / f"level_{n}-00000-of-00001.parquet"))
    problems = load_problems(f"hf:{tmp_path / 'hub'}")
    assert sorted({p.level for p in problems}) == [1, 3]
    assert len(problems) == 6


def test_bundled_suites_load():
    for suite in ("ops", "bert"):
        problems = load_problems(suite)
        assert problems and all(p.source == suite for p in problems)
    assert len(load_problems("ops")) >= 20
