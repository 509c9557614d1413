"""Completion: what every model's `generate` returns (API model, offline model, cache).

`reasoning` is kept apart from `text`, so code extraction and the history never see it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Completion(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    reasoning: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0          # wall time of the request that answered (not of retries)
    attempts: int = 1               # requests sent, retries included (0 for offline models)
    finish_reason: str | None = None  # "stop", "length" (hit max_tokens), ...
    cost: float | None = None       # USD, from the endpoint's per-million-token prices
    cached: bool = False            # True when it came from the response cache
