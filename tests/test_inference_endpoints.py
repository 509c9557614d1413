"""ModelEndpoint validation, config.py's shipped MODELS, resolve_model, check_api_key."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kb_eval.errors import UserError
from kb_eval.inference.endpoints import (ModelEndpoint, check_api_key, load_endpoints,
                                         resolve_model)

CONFIG = Path(__file__).resolve().parents[1] / "config.py"


def shipped_models() -> list[dict]:
    spec = importlib.util.spec_from_file_location("kb_eval_test_config", CONFIG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MODELS


def test_shipped_models_validate() -> None:
    endpoints = {ep.name: ep for ep in load_endpoints(shipped_models())}
    assert {"deepseek-chat", "deepseek-reasoner", "gpt-4.1", "local-vllm"} <= set(endpoints)
    assert endpoints["deepseek-reasoner"].reasoning
    assert endpoints["deepseek-chat"].api_key_env == "DEEPSEEK_API_KEY"
    assert endpoints["local-vllm"].api_key_env is None
    assert endpoints["local-vllm"].base_url == "http://127.0.0.1:8000/v1"


def test_resolve_model_lists_known_names() -> None:
    models = [dict(name="a", base_url="http://x", model="a1"),
              dict(name="b", base_url="http://x", model="b1")]
    assert resolve_model("b", models).model == "b1"
    with pytest.raises(UserError) as info:
        resolve_model("c", models)
    assert "known models: a, b, reference" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("entry, words", [
    (dict(name="a", base_url="http://x"), "model"),
    (dict(name="a", base_url="http://x", model="m", temprature=0.1), "temprature"),
    (dict(name="a", base_url="http://x", model="m", max_concurrency=0), "max_concurrency"),
])
def test_bad_entries_name_the_field(entry: dict, words: str) -> None:
    with pytest.raises(UserError, match=rf"MODELS\[0\] \(a\): .*{words}"):
        load_endpoints([entry])


def test_duplicate_and_builtin_names_refused() -> None:
    entry = dict(name="a", base_url="http://x", model="m")
    with pytest.raises(UserError, match="used twice"):
        load_endpoints([entry, entry])
    with pytest.raises(UserError, match="built-in"):
        load_endpoints([{**entry, "name": "reference"}])


def test_check_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = ModelEndpoint(name="ds", base_url="https://api.deepseek.com", model="deepseek-chat",
                       api_key_env="DEEPSEEK_API_KEY")
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(UserError, match=r"^set DEEPSEEK_API_KEY"):
        check_api_key(ep)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-1")
    assert check_api_key(ep) == "sk-1"
    local = ModelEndpoint(name="local", base_url="http://127.0.0.1:8000/v1", model="m")
    assert check_api_key(local)  # a placeholder: the SDK wants some key


def test_request_params_and_cost() -> None:
    chat = ModelEndpoint(name="c", base_url="http://x", model="m", temperature=0.2, top_p=0.9,
                         max_tokens=100, price_in_per_mtok=0.28, price_out_per_mtok=0.42)
    assert chat.request_params() == {"max_tokens": 100, "temperature": 0.2, "top_p": 0.9}
    assert chat.cost(1_000_000, 2_000_000) == pytest.approx(0.28 + 0.84)
    reasoner = chat.model_copy(update={"reasoning": True, "price_out_per_mtok": None})
    assert reasoner.request_params() == {"max_tokens": 100}
    assert reasoner.cost(10, 10) is None
