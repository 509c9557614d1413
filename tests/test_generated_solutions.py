"""The code the solutions share (reference_kernels/solutions/<backend>/_parts) is spliced into each
self-contained solution file by reference_kernels/generate.py: the committed files must be what
it generates, and its --check must notice when they are not (run on a copy, never the tree)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "reference_kernels" / "generate.py"
SOLUTIONS = REPO / "reference_kernels" / "solutions"


def generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def stale_files(proc: subprocess.CompletedProcess) -> set[str]:
    return {line.removeprefix("stale: ") for line in proc.stdout.splitlines() if line.startswith("stale: ")}


def users_of(root: Path, part: str) -> set[str]:
    return {p.relative_to(root).as_posix() for p in sorted((root / "cuda").glob("*.py"))
            if f"generated from _parts/{part}:" in p.read_text()}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(SOLUTIONS / "cuda", tmp_path / "cuda")
    return tmp_path


def test_committed_files_are_up_to_date():
    proc = generate("--check")
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}(run: python reference_kernels/generate.py)"


def test_edited_part_makes_its_users_stale(copy):
    part = copy / "cuda" / "_parts" / "layernorm_epilogue.cuh"
    part.write_text(part.read_text().replace("WARPS = 8", "WARPS = 4"))
    before = {p: p.read_text() for p in (copy / "cuda").glob("*.py")}
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 1
    assert stale_files(proc) == users_of(copy, "layernorm_epilogue.cuh")
    assert len(stale_files(proc)) == 4  # both GEMM + LN twins, both __cublas twins (layernorm.py: its own kernel)
    assert {p: p.read_text() for p in before} == before  # --check writes nothing
    assert generate("--root", str(copy)).returncode == 0
    assert generate("--check", "--root", str(copy)).returncode == 0
    assert "WARPS = 4" in (copy / "cuda" / "gemm_bias_add_layernorm.py").read_text()


def test_nested_part_reaches_every_file(copy):
    # ptx_mma.cuh is spliced into softmax_attention directly and into the others through gemm_core.cuh
    part = copy / "cuda" / "_parts" / "ptx_mma.cuh"
    part.write_text(part.read_text() + "// changed\n")
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 1
    assert stale_files(proc) == {"cuda/softmax_attention.py", "cuda/gemm.py", "cuda/gemm_bias_add_layernorm.py",
                                 "cuda/gemm_bias_gelu_add_layernorm.py"}


def test_hand_edit_inside_a_block_is_stale(copy):
    path = copy / "cuda" / "gemm.py"
    text = path.read_text()
    assert text.count("constexpr int STAGES = 4;") == 1
    path.write_text(text.replace("constexpr int STAGES = 4;", "constexpr int STAGES = 3;"))
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 1 and stale_files(proc) == {"cuda/gemm.py"}
    generate("--root", str(copy))
    assert path.read_text() == text


def test_broken_markers_are_errors(copy):
    path = copy / "cuda" / "gemm_bias_add_layernorm.py"
    text = path.read_text()
    path.write_text(text.replace("// ---- END generated from _parts/layernorm_epilogue.cuh ----\n", ""))
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 2 and "has no END line" in proc.stderr
    path.write_text(text.replace("// ---- BEGIN generated", "  // ---- BEGIN generated"))  # indented: unseen
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 2 and "not a marker line" in proc.stderr
    path.write_text(text)
    (copy / "cuda" / "_parts" / "orphan.cuh").write_text("// nothing splices this in\n")
    proc = generate("--check", "--root", str(copy))
    assert proc.returncode == 2 and "parts no solution uses: orphan.cuh" in proc.stderr


def test_cpp_parts_reach_their_users(tmp_path: Path):
    # cpu_math.h is spliced into gelu.py directly and into the row-kernel files through cpu_rows.h
    shutil.copytree(SOLUTIONS / "cpp", tmp_path / "cpp")
    part = tmp_path / "cpp" / "_parts" / "cpu_math.h"
    part.write_text(part.read_text() + "// changed\n")
    proc = generate("--check", "--root", str(tmp_path))
    assert proc.returncode == 1
    assert stale_files(proc) == {f"cpp/{name}.py" for name in (
        "gelu", "layernorm", "softmax_attention", "gemm_bias_add_layernorm",
        "gemm_bias_gelu_add_layernorm", "encoder_layer")}
    assert generate("--root", str(tmp_path)).returncode == 0
    assert (tmp_path / "cpp" / "encoder_layer.py").read_text().count("// changed\n") == 1
