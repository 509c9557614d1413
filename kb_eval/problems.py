"""Problems: one `Problem` type and the loaders that find them.

A problem is a KernelBench-format source (`Model`, `get_inputs`, `get_init_inputs`).
Sources: a bundled suite (`ops`, `bert`, ... under reference_kernels/problems/), a local
folder in KernelBench layout (`level<N>/<id>_<Name>.py`), or the Hugging Face dataset
(`hf` or `hf:<repo-id-or-local-dir>`). The parent only parses problem code (ast); it is
executed in child processes through `load_module`.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import socket
import sys
import threading
import types
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel

from kb_eval.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_DIR = REPO_ROOT / "reference_kernels" / "problems"
HF_DEFAULT_REPO = "ScalingIntelligence/KernelBench"
_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_RE = re.compile(r"^level_?(\d+)$")


class Problem(BaseModel):
    source: str
    level: int
    problem_id: int
    name: str
    code: str
    path: str | None = None

    @property
    def key(self) -> str:
        return f"{self.source}/level{self.level}/{self.problem_id}"

    @property
    def slug(self) -> str:
        return f"level{self.level}_problem{self.problem_id}"


# ---------------------------------------------------------------- selection parsing
def parse_ids(spec: str | None) -> set[int] | None:
    """'1-10,15' -> {1..10, 15}; None or '' -> None (all)."""
    if not spec:
        return None
    ids: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UserError(f"bad --problems entry {part!r}: use ids and ranges like 1-10,15")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise UserError(f"bad --problems range {part!r}: end before start")
        ids.update(range(lo, hi + 1))
    return ids


def as_levels(level: int | list[int] | tuple[int, ...] | None) -> list[int] | None:
    """One level, several, or None (all), as a sorted list or None."""
    if level is None:
        return None
    levels = [level] if isinstance(level, int) else list(level)
    return sorted(set(levels)) or None


def select(problems: list[Problem], level: int | list[int] | None, ids: str | None,
           name: str | None, where: str) -> list[Problem]:
    """Filter by level(s), id list/ranges and name substring; every asked level and id
    must exist."""
    levels = sorted({p.level for p in problems})
    asked = as_levels(level)
    unknown = [lv for lv in asked or [] if lv not in levels]
    if unknown:
        shown = ", ".join(map(str, unknown))
        raise UserError(f"level {shown} not in {where} (levels there: {levels or 'none'})")
    chosen = [p for p in problems if asked is None or p.level in asked]
    wanted = parse_ids(ids)
    if wanted is not None:
        have = {p.problem_id for p in chosen}
        missing = sorted(wanted - have)
        if missing:
            in_levels = "" if asked is None else f" level {','.join(map(str, asked))}"
            raise UserError(f"problem id(s) {_ranges(missing)} not in {where}{in_levels}")
        chosen = [p for p in chosen if p.problem_id in wanted]
    if name:
        chosen = [p for p in chosen if name.lower() in p.name.lower()]
    if not chosen:
        raise UserError(f"no problem in {where} matches the selection")
    return sorted(chosen, key=lambda p: (p.level, p.problem_id))


def _ranges(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids[:10]) + ("..." if len(ids) > 10 else "")


# ---------------------------------------------------------------- validation
def check_problem_code(code: str, where: str) -> None:
    """A problem must define class Model, get_inputs and get_init_inputs (checked by ast)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise UserError(f"{where}: not valid Python ({e.msg}, line {e.lineno})") from None
    defined = {n.name for n in tree.body
               if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    missing = [s for s in ("Model", "get_inputs", "get_init_inputs") if s not in defined]
    if missing:
        raise UserError(f"{where}: not a problem file, it lacks {', '.join(missing)}")


# ---------------------------------------------------------------- loaders
def load_folder(root: Path, source: str) -> list[Problem]:
    """A KernelBench-layout folder: level<N>/<id>_<Name>.py."""
    if not root.is_dir():
        raise UserError(f"problem folder {root} does not exist")
    problems = []
    for level_dir in sorted(root.iterdir()):
        m = _LEVEL_RE.match(level_dir.name)
        if not (level_dir.is_dir() and m):
            continue
        for f in sorted(level_dir.glob("*.py")):
            fm = _FILE_RE.match(f.name)
            if not fm:
                continue
            code = f.read_text()
            check_problem_code(code, str(f))
            problems.append(Problem(source=source, level=int(m.group(1)),
                                    problem_id=int(fm.group(1)), name=fm.group(2),
                                    code=code, path=str(f)))
    if not problems:
        raise UserError(f"{root} holds no problems (expected level<N>/<id>_<Name>.py files)")
    return problems


def bundled_suites() -> list[str]:
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if p.is_dir()) if BUNDLED_DIR.is_dir() else []


def load_hf(spec: str, level: int | list[int] | None) -> list[Problem]:
    """The KernelBench dataset (splits level_1..), from the hub (its cache when the hub
    cannot be reached) or from a local `save_to_disk` or parquet (`level_1-*.parquet`)
    folder."""
    target = spec.partition(":")[2] or HF_DEFAULT_REPO
    asked = as_levels(level)
    levels = asked or [1, 2, 3, 4]
    local = Path(target)
    offline = not local.is_dir() and go_offline_unless_hub_answers()
    import datasets  # slow import: only when asked, and after HF_HUB_OFFLINE is settled
    try:
        if (local / "dataset_dict.json").exists():
            dd = datasets.load_from_disk(str(local))
            splits = {n: dd[f"level_{n}"] for n in levels if f"level_{n}" in dd}
        elif local.is_dir():
            splits = {}
            for n in levels:
                files = sorted(str(f) for f in local.rglob(f"level_{n}*.parquet"))
                if files:
                    splits[n] = datasets.load_dataset("parquet", data_files=files, split="train")
        else:
            splits = {}
            for n in levels:
                try:
                    splits[n] = datasets.load_dataset(target, split=f"level_{n}")
                except ValueError:  # unknown split
                    if asked is not None:
                        raise
    except (FileNotFoundError, ConnectionError, ValueError, OSError) as e:
        why = (f"the hub ({hub_endpoint()}) cannot be reached and no copy is cached; pass "
               f"--source hf:<folder> for a local copy" if offline
               else str(e).splitlines()[0])
        raise UserError(f"cannot load dataset {target!r}: {why}") from None
    unknown = [n for n in asked or [] if n not in splits]
    if unknown:
        raise UserError(f"level {','.join(map(str, unknown))} not in dataset {target!r}")
    problems = []
    for n, ds in splits.items():
        for row in ds:
            where = f"{target} level_{n} problem {row['problem_id']}"
            check_problem_code(row["code"], where)
            problems.append(Problem(source="hf", level=int(row.get("level") or n),
                                    problem_id=int(row["problem_id"]), name=str(row["name"]).removesuffix(".py").split("_", 1)[-1],
                                    code=row["code"]))
    return problems


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def go_offline_unless_hub_answers(timeout_s: float = 3.0) -> bool:
    """Try the Hugging Face hub within `timeout_s` (DNS included, in a thread left behind);
    when that fails, set HF_HUB_OFFLINE so that `datasets` reads its cache at once
    instead of retrying. True when offline (already, or now)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return True
    url = urlsplit(hub_endpoint())
    answered = threading.Event()

    def connect() -> None:
        try:
            with socket.create_connection((url.hostname, url.port or (
                    443 if url.scheme == "https" else 80)), timeout=timeout_s):
                answered.set()
        except OSError:
            pass

    threading.Thread(target=connect, daemon=True, name="kb-hub-probe").start()
    if answered.wait(timeout_s):
        return False
    os.environ["HF_HUB_OFFLINE"] = "1"
    return True


def load_problems(source: str = "bert", level: int | list[int] | None = None,
                  ids: str | None = None, name: str | None = None) -> list[Problem]:
    """Resolve a source (bundled suite name, folder path, `hf[:repo-or-dir]`) and select
    (`level`: one level, a list of them, or None for all)."""
    if source == "hf" or source.startswith("hf:"):
        return select(load_hf(source, level), level, ids, name, where=source)
    if source in bundled_suites():
        return select(load_folder(BUNDLED_DIR / source, source), level, ids, name, where=source)
    path = Path(source).expanduser()
    if path.exists() or "/" in source or source.startswith("."):
        return select(load_folder(path, source_label(path)), level, ids, name, where=str(path))
    raise UserError(f"unknown problem source {source!r}: use one of {bundled_suites()}, "
                    f"a folder in KernelBench layout, or hf[:repo-or-dir]")


def source_label(path: Path) -> str:
    """A short stable label for a local folder, used in problem keys."""
    return "local-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", path.resolve().name).strip(".-") or "dir")


# ---------------------------------------------------------------- execution (children only)
def load_module(code: str, module_name: str) -> types.ModuleType:
    """Exec a problem or candidate source as a fresh module. Call only in child processes."""
    module = types.ModuleType(module_name)
    module.__file__ = f"<{module_name}>"
    # Triton's @jit reads its kernel's source through inspect/linecache: register it.
    linecache.cache[module.__file__] = (len(code), None, code.splitlines(True), module.__file__)
    sys.modules[module_name] = module
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    return module


def reference_copy(problem: "Problem") -> str:
    """A candidate that is the problem's own reference (`ModelNew = Model`), evaluated by
    `check --harness`: it must be judged correct at a speedup of about 1."""
    return f"{problem.code.rstrip()}\n\n\nModelNew = Model  # kb-eval: the reference as the candidate\n"
