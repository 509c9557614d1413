"""Model endpoints: config.py's `MODELS` entries (plain dicts) validated into `ModelEndpoint`.

    ep = resolve_model("deepseek-chat", config.MODELS)   # UserError listing names if unknown
    api_key = check_api_key(ep)                           # UserError "set DEEPSEEK_API_KEY ..."
    ep.request_params()   # the sampling params sent with each request (and cache-keyed)
    ep.cost(prompt_tokens, completion_tokens)             # USD or None

Reasoning models (`reasoning: True`) get no temperature/top_p (o-series models refuse
them). Names in `BUILTIN_MODELS` answer offline (models.py) and need no entry.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kb_eval.errors import UserError

BUILTIN_MODELS = ("reference",)
NO_KEY = "no-key-needed"  # the openai SDK insists on some key; local servers ignore it


class ModelEndpoint(BaseModel):
    """One OpenAI-compatible chat endpoint and how to sample from it."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="our name for it (--model, results folder)")
    base_url: str = Field(min_length=1, description="e.g. https://api.deepseek.com")
    model: str = Field(min_length=1, description="the API's model id")
    api_key_env: str | None = Field(None, description="env var holding the key; None: no key")
    temperature: float | None = Field(0.0, ge=0, le=2, description="None: not sent")
    top_p: float | None = Field(None, gt=0, le=1, description="None: not sent")
    max_tokens: int = Field(8192, ge=1, description="cap on answer (+reasoning) tokens")
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="OpenAI o-series models want max_completion_tokens")
    max_concurrency: int = Field(4, ge=1, description="requests in flight at once")
    timeout_s: float = Field(600.0, gt=0, description="per request")
    reasoning: bool = Field(False, description="a reasoning model: no temperature/top_p")
    price_in_per_mtok: float | None = Field(None, ge=0, description="USD per 1M prompt tokens")
    price_out_per_mtok: float | None = Field(None, ge=0, description="USD per 1M output tokens")
    extra_body: dict[str, Any] | None = Field(None, description="extra JSON fields sent as is")

    def request_params(self) -> dict[str, Any]:
        """The sampling params of every request (also part of the cache key)."""
        params: dict[str, Any] = {self.max_tokens_param: self.max_tokens}
        if not self.reasoning:
            if self.temperature is not None:
                params["temperature"] = self.temperature
            if self.top_p is not None:
                params["top_p"] = self.top_p
        return params

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.price_in_per_mtok is None or self.price_out_per_mtok is None:
            return None
        return (prompt_tokens * self.price_in_per_mtok
                + completion_tokens * self.price_out_per_mtok) / 1e6


def load_endpoints(models: Iterable[Mapping[str, Any] | ModelEndpoint]) -> list[ModelEndpoint]:
    """Validate config.py's MODELS; a bad entry is one UserError line naming it."""
    endpoints: list[ModelEndpoint] = []
    for i, entry in enumerate(models):
        if isinstance(entry, ModelEndpoint):
            endpoints.append(entry)
            continue
        try:
            endpoints.append(ModelEndpoint.model_validate(dict(entry)))
        except (ValidationError, TypeError, ValueError) as e:
            label = entry.get("name", "?") if isinstance(entry, Mapping) else "?"
            raise UserError(f"config.py MODELS[{i}] ({label}): {_first_error(e)}") from None
    names = [ep.name for ep in endpoints]
    for name in names:
        if names.count(name) > 1 or name in BUILTIN_MODELS:
            raise UserError(f"config.py MODELS: model name {name!r} is used twice "
                            f"(or is a built-in: {', '.join(BUILTIN_MODELS)})")
    return endpoints


def resolve_model(name: str, models: Iterable[Mapping[str, Any] | ModelEndpoint]) -> ModelEndpoint:
    """The endpoint called `name`; UserError listing the known names otherwise."""
    endpoints = load_endpoints(models)
    for ep in endpoints:
        if ep.name == name:
            return ep
    known = [ep.name for ep in endpoints] + list(BUILTIN_MODELS)
    raise UserError(f"unknown model {name!r}; known models: {', '.join(known)} "
                    f"(add it to MODELS in config.py)")


def check_api_key(ep: ModelEndpoint) -> str:
    """The API key to send (a placeholder when none is needed); UserError when unset."""
    if ep.api_key_env is None:
        return NO_KEY
    key = os.environ.get(ep.api_key_env, "").strip()
    if not key:
        raise UserError(f"set {ep.api_key_env} to your API key for {ep.name} ({ep.base_url}), "
                        f"e.g. export {ep.api_key_env}=...")
    return key


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "entry"
        return f"{where}: {err['msg']}"
    return str(e)
