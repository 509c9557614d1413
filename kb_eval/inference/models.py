"""Models: anything with `generate(messages, sample_index, *, turn, problem_key) -> Completion`.

    model = get_model("deepseek-chat", config.MODELS, backend="cuda",
                      cache_dir=run_dir / "inference_cache")
    completion = model.generate(messages, sample_index=0, turn=0, problem_key="bert/level1/3")

OpenAIModel asks an endpoint; ReferenceModel ("reference", offline) answers with
reference_kernels/solutions/<backend>/ (no_code where there is none); CachedModel wraps any
model with a ResponseCache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

from kb_eval.inference.cache import ResponseCache, cache_key
from kb_eval.inference.client import ChatClient, RetryPolicy
from kb_eval.inference.completion import Completion
from kb_eval.inference.endpoints import ModelEndpoint, check_api_key, resolve_model
from kb_eval.solutions import SOLUTIONS_ROOT, load_index, pick

Messages = list[dict[str, str]]


class Model(Protocol):
    name: str

    def identity(self) -> dict[str, Any]:
        """What answers depend on besides the prompt (cache key part)."""

    def params(self) -> dict[str, Any]:
        """Sampling params sent with each request (cache key part)."""

    def generate(self, messages: Messages, sample_index: int = 0, *, turn: int = 0,
                 problem_key: str | None = None) -> Completion: ...


class OpenAIModel:
    def __init__(self, endpoint: ModelEndpoint, client: ChatClient):
        self.name = endpoint.name
        self.endpoint = endpoint
        self.client = client

    def identity(self) -> dict[str, Any]:
        ep = self.endpoint
        return {"name": ep.name, "model": ep.model, "base_url": ep.base_url}

    def params(self) -> dict[str, Any]:
        return {**self.endpoint.request_params(), "extra_body": self.endpoint.extra_body}

    def generate(self, messages: Messages, sample_index: int = 0, *, turn: int = 0,
                 problem_key: str | None = None) -> Completion:
        return self.client.complete(messages)


class ReferenceModel:
    name = "reference"

    def __init__(self, backend: str, solutions_root: Path | str = SOLUTIONS_ROOT,
                 precision: str = "fp32"):
        self.backend = backend
        self.precision = precision
        self.root = Path(solutions_root)
        self.folder = self.root / backend
        self._index: dict | None = None

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend, "precision": self.precision}

    def params(self) -> dict[str, Any]:
        return {}

    def generate(self, messages: Messages, sample_index: int = 0, *, turn: int = 0,
                 problem_key: str | None = None) -> Completion:
        if problem_key is None:
            raise ValueError("the reference model needs the problem_key")
        file_name = pick(self.index().get(problem_key), self.precision)
        if file_name is None:
            return Completion(text=f"The reference model has no {self.backend} solution for "
                                   f"{problem_key}.", attempts=0, finish_reason="stop", cost=0.0)
        source = (self.folder / file_name).read_text(encoding="utf-8")
        return Completion(text=f"```python\n{source.rstrip()}\n```\n", attempts=0,
                          finish_reason="stop", cost=0.0)

    def index(self) -> dict:
        if self._index is None:
            self._index = load_index(self.backend, self.root)
        return self._index


class CachedModel:
    """Any model, with answers read from / written to a ResponseCache."""

    def __init__(self, model: Model, cache: ResponseCache):
        self.model = model
        self.cache = cache
        self.name = model.name

    def identity(self) -> dict[str, Any]:
        return self.model.identity()

    def params(self) -> dict[str, Any]:
        return self.model.params()

    def generate(self, messages: Messages, sample_index: int = 0, *, turn: int = 0,
                 problem_key: str | None = None) -> Completion:
        identity, params = self.identity(), self.params()
        key = cache_key(identity, messages, params, sample_index, turn)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        completion = self.model.generate(messages, sample_index, turn=turn,
                                         problem_key=problem_key)
        self.cache.put(key, completion, identity=identity, messages=messages, params=params,
                       sample_index=sample_index, turn=turn)
        return completion


def get_model(name: str, models: Iterable[Mapping[str, Any] | ModelEndpoint], *, backend: str,
              cache_dir: Path | str | None = None, retry: RetryPolicy | None = None,
              solutions_root: Path | str = SOLUTIONS_ROOT, precision: str = "fp32") -> Model:
    """The model called `name` (built-in or from MODELS), API models cached under
    `cache_dir`. UserError for an unknown name or a missing API key."""
    if name == ReferenceModel.name:
        return ReferenceModel(backend, solutions_root, precision)
    endpoint = resolve_model(name, models)
    model = OpenAIModel(endpoint, ChatClient(endpoint, check_api_key(endpoint), retry))
    return CachedModel(model, ResponseCache(cache_dir)) if cache_dir is not None else model
