"""Models and the response cache: a rerun asks the server nothing twice; the offline
reference model answers from the solutions index; get_model's user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai_server import ScriptedServer, error, reply

from kb_eval.errors import UserError
from kb_eval.inference.cache import ResponseCache, cache_key
from kb_eval.inference.client import InferenceError, RetryPolicy
from kb_eval.inference.extract import extract_code
from kb_eval.inference.models import CachedModel, ReferenceModel, get_model
from kb_eval.inference.prompts import build_prompt

FAST_RETRY = RetryPolicy(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.01)
MESSAGES = [{"role": "user", "content": "problem A"}]
ANSWER = "```python\nclass ModelNew:\n    pass\n```"


def local_models(server: ScriptedServer, **fields) -> list[dict]:
    return [dict(name="local", base_url=server.base_url, model="m", api_key_env=None,
                 timeout_s=5, **fields)]


def test_rerun_is_served_from_cache(tmp_path: Path) -> None:
    cache_dir = tmp_path / "run" / "inference_cache"
    with ScriptedServer(default=reply(ANSWER, reasoning="why", completion_tokens=9)) as server:
        first = get_model("local", local_models(server), backend="cuda", cache_dir=cache_dir,
                          retry=FAST_RETRY)
        a = first.generate(MESSAGES, 0, turn=0)
        # a second run (new model object, same folder) asks nothing already answered
        second = get_model("local", local_models(server), backend="cuda", cache_dir=cache_dir,
                           retry=FAST_RETRY)
        b = second.generate(MESSAGES, 0, turn=0)
        assert len(server.requests) == 1
        # another sample, another turn, or other sampling params: new requests
        second.generate(MESSAGES, 1, turn=0)
        second.generate(MESSAGES, 0, turn=1)
        get_model("local", local_models(server, temperature=0.5), backend="cuda",
                  cache_dir=cache_dir, retry=FAST_RETRY).generate(MESSAGES, 0)
        assert len(server.requests) == 4
    assert not a.cached and b.cached
    assert (b.text, b.reasoning, b.completion_tokens) == (ANSWER, "why", 9)
    files = sorted(cache_dir.iterdir())
    assert len(files) == 4 and all(f.suffix == ".json" for f in files)  # no temp files left
    record = json.loads(files[0].read_text())
    for field in ("prompt_hash", "params", "sample_index", "turn", "timestamp", "model"):
        assert field in record
    for field in ("text", "reasoning", "prompt_tokens", "completion_tokens", "latency_s"):
        assert field in record["completion"]


def test_failures_are_not_cached(tmp_path: Path) -> None:
    with ScriptedServer([error(400), reply(ANSWER)]) as server:
        model = get_model("local", local_models(server), backend="cuda",
                          cache_dir=tmp_path, retry=FAST_RETRY)
        with pytest.raises(InferenceError):
            model.generate(MESSAGES)
        assert model.generate(MESSAGES).text == ANSWER
    assert len(server.requests) == 2


def test_unreadable_cache_file_is_a_miss(tmp_path: Path) -> None:
    class Counting:
        name = "counting"
        calls = 0

        def identity(self):
            return {"name": self.name}

        def params(self):
            return {}

        def generate(self, messages, sample_index=0, *, turn=0, problem_key=None):
            from kb_eval.inference.completion import Completion
            self.calls += 1
            return Completion(text="fresh")

    inner = Counting()
    model = CachedModel(inner, ResponseCache(tmp_path))
    key = cache_key({"name": "counting"}, MESSAGES, {}, 0, 0)
    (tmp_path / f"{key}.json").write_text("{ half a file")
    assert model.generate(MESSAGES).text == "fresh" and inner.calls == 1
    assert model.generate(MESSAGES).cached and inner.calls == 1


def test_reference_model_answers_from_index(tmp_path: Path) -> None:
    folder = tmp_path / "cuda"
    folder.mkdir()
    (folder / "relu.py").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    (folder / "index.json").write_text(json.dumps({"bert/level1/1": "relu.py"}))
    model = get_model("reference", [], backend="cuda", solutions_root=tmp_path,
                      cache_dir=tmp_path / "cache")
    assert isinstance(model, ReferenceModel)
    messages = build_prompt("class Model: ...", "cuda", "fp32", "zero_shot",
                            {"kind": "gpu", "name": "test GPU"})
    completion = model.generate(messages, 0, problem_key="bert/level1/1")
    assert extract_code(completion.text).ok and "class ModelNew" in completion.text
    assert (completion.prompt_tokens, completion.completion_tokens, completion.cost) == (0, 0, 0.0)
    missing = model.generate(messages, 0, problem_key="bert/level1/2")
    assert extract_code(missing.text).outcome == "no_code"
    with pytest.raises(UserError, match="triton"):
        ReferenceModel("triton", tmp_path).generate(messages, 0, problem_key="bert/level1/1")


def test_get_model_user_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    models = [dict(name="deepseek-chat", base_url="https://api.deepseek.com",
                   model="deepseek-chat", api_key_env="DEEPSEEK_API_KEY")]
    with pytest.raises(UserError, match="known models: deepseek-chat, reference"):
        get_model("gpt-9", models, backend="cuda")
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(UserError, match="set DEEPSEEK_API_KEY"):
        get_model("deepseek-chat", models, backend="cuda")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    assert get_model("deepseek-chat", models, backend="cuda").name == "deepseek-chat"
