"""ResponseCache: every answer on disk, one JSON file per request, so a rerun (or a run
that crashed) asks nothing twice.

    cache = ResponseCache(run_dir / "inference_cache")
    key = cache_key(identity, messages, params, sample_index, turn)
    cache.get(key) -> Completion | None       # cached=True
    cache.put(key, completion, identity=..., messages=..., params=..., sample_index=..., turn=...)

The key covers the model identity and the sample index; an unreadable file is a miss;
failed requests are not cached.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from kb_eval.inference.completion import Completion
from kb_eval.results import write_json_atomic

SCHEMA_VERSION = 1


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(_canonical(messages).encode()).hexdigest()


def cache_key(identity: dict[str, Any], messages: list[dict[str, Any]], params: dict[str, Any],
              sample_index: int, turn: int) -> str:
    payload = {"model": identity, "messages": messages, "params": params,
               "sample_index": sample_index, "turn": turn}
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


class ResponseCache:
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> Completion | None:
        try:
            record = json.loads(self.path(key).read_text(encoding="utf-8"))
            return Completion.model_validate({**record["completion"], "cached": True})
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or not ours/unreadable: ask again

    def put(self, key: str, completion: Completion, *, identity: dict[str, Any],
            messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int,
            turn: int) -> None:
        record = {
            "schema_version": SCHEMA_VERSION,
            "key": key,
            "model": identity,
            "prompt_hash": prompt_hash(messages),
            "params": params,
            "sample_index": sample_index,
            "turn": turn,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "completion": completion.model_dump(exclude={"cached"}),
        }
        write_json_atomic(self.path(key), record)
