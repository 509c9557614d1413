"""Load the user's config.py (MODELS and DEFAULTS) and validate it with pydantic.

Where config.py is read from: $KB_EVAL_CONFIG, else ./config.py, else the one at the repo
root. A wrong value stops the command with one line naming the field.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kb_eval.errors import UserError
from kb_eval.problems import REPO_ROOT


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = "bert"
    backend: Literal["auto", "cuda", "triton", "cpp"] = "auto"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    results_dir: Path = Path("results")
    cache_dir: Path = Path(".cache/kb_eval")
    warmup: int = Field(5, ge=0)
    trials: int = Field(100, ge=1)
    cpu_trials: int = Field(5, ge=1)
    cpu_warmup: int = Field(1, ge=0)
    correct_trials: int = Field(5, ge=1)
    baseline_visits: int = Field(1, ge=1)  # children per problem in kb_eval.baseline (GPU)
    build_timeout_s: float = Field(600, gt=0)
    run_timeout_s: float = Field(300, gt=0)
    # children in flight per device; unset: 3 on a GPU, 1 on a CPU (kb_eval/cli.py lane_depth)
    lane_depth: int = Field(1, ge=1, le=16)
    load_budget_s: float = Field(90, gt=0)  # a candidate's import, init and first call
    call_budget_s: float = Field(30, gt=0)  # each later call
    mem_limit_mb: int = Field(16000, ge=256)
    # Each correct sample's kernel launches per forward (one profiled call per side, after
    # timing; never scored). None: on the CPU only; on a GPU starting the profiler (CUPTI)
    # costs 5-7 s per candidate process (H100), so a GPU run counts only when set True.
    count_launches: bool | None = None
    # kb_eval.profile: forwards recorded (figures are per forward) and forwards before
    # them, on a GPU and on the CPU.
    profile_steps: int = Field(5, ge=1)
    profile_warmup: int = Field(3, ge=0)
    profile_cpu_steps: int = Field(2, ge=1)
    profile_cpu_warmup: int = Field(1, ge=0)
    # Tuning knobs (docs/FLAGS.md, "Settings in config.py"): stand-in device lanes on a
    # CPU (CI), timed calls whose outputs are checked too, and the timing budget per sample
    # in ms (0: always `trials`); kb_eval.eval's EvalConfig and TimingSettings carry them.
    cpu_lanes: int = Field(1, ge=1, le=8)
    recheck_timed: int = Field(8, ge=0)
    timing_budget_ms: float = Field(100.0, ge=0)


class Settings(BaseModel):
    models: list  # list[ModelEndpoint], validated by kb_eval.inference.endpoints
    defaults: Defaults
    path: Path | None = None


def config_path() -> Path | None:
    """$KB_EVAL_CONFIG when set (it must exist: falling back to another file would run
    with settings the user did not ask for), else ./config.py, else the repo's."""
    env = os.environ.get("KB_EVAL_CONFIG")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise UserError(f"KB_EVAL_CONFIG={env}: {what} (expected a config.py file)")
        return path
    for candidate in (Path("config.py"), REPO_ROOT / "config.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=4)
def _load(path: Path | None) -> Settings:
    raw_models, raw_defaults = [], {}
    if path is not None:
        spec = importlib.util.spec_from_file_location("kb_eval_user_config", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # the user's file: report, don't trace
            raise UserError(f"{path}: cannot load ({type(e).__name__}: {e})") from None
        raw_models = getattr(module, "MODELS", [])
        raw_defaults = getattr(module, "DEFAULTS", {})
    try:
        defaults = Defaults.model_validate(raw_defaults)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(map(str, err["loc"]))
        raise UserError(f"{path}: DEFAULTS.{field}: {err['msg']} (got {err.get('input')!r})") from None
    from kb_eval.inference.endpoints import load_endpoints

    return Settings(models=load_endpoints(raw_models), defaults=defaults, path=path)


def load_settings() -> Settings:
    return _load(config_path())
