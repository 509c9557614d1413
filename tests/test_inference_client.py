"""ChatClient against a real local HTTP server through the real openai SDK: retries,
Retry-After, no retry on client errors, timeouts, concurrency limit, reasoning apart."""

from __future__ import annotations

import threading
import time

import pytest
from openai_server import ScriptedServer, error, reply, slow

from kb_eval.errors import UserError
from kb_eval.inference.client import ChatClient, InferenceError, RetryPolicy, retry_after_s
from kb_eval.inference.endpoints import ModelEndpoint

FAST_RETRY = RetryPolicy(max_attempts=4, backoff_base_s=0.01, backoff_max_s=0.05)
MESSAGES = [{"role": "user", "content": "write a kernel"}]


def make_client(server: ScriptedServer, retry: RetryPolicy = FAST_RETRY, **fields) -> ChatClient:
    endpoint = ModelEndpoint(**{"name": "test", "base_url": server.base_url,
                                "model": "test-model", "timeout_s": 5.0, **fields})
    return ChatClient(endpoint, "test-key", retry)


def test_plain_answer_tokens_cost_and_request() -> None:
    with ScriptedServer([reply("hello", prompt_tokens=1000, completion_tokens=500)]) as server:
        client = make_client(server, temperature=0.7, top_p=0.9, max_tokens=123,
                             price_in_per_mtok=1.0, price_out_per_mtok=4.0,
                             extra_body={"seed": 7})
        completion = client.complete(MESSAGES)
    assert completion.text == "hello" and completion.reasoning is None
    assert (completion.prompt_tokens, completion.completion_tokens) == (1000, 500)
    assert completion.cost == pytest.approx((1000 * 1.0 + 500 * 4.0) / 1e6)
    assert completion.attempts == 1 and completion.finish_reason == "stop"
    assert completion.latency_s > 0
    [request] = server.requests
    body = request["body"]
    assert body["model"] == "test-model" and body["messages"] == MESSAGES
    sent = (body["temperature"], body["top_p"], body["max_tokens"], body["seed"])
    assert sent == (0.7, 0.9, 123, 7)
    assert request["headers"]["authorization"] == "Bearer test-key"


def test_retries_server_errors_then_succeeds() -> None:
    with ScriptedServer([error(500), error(503), reply("third time")]) as server:
        completion = make_client(server).complete(MESSAGES)
    assert completion.text == "third time" and completion.attempts == 3
    assert len(server.requests) == 3


def test_gives_up_after_max_attempts() -> None:
    with ScriptedServer(default=error(502)) as server:
        with pytest.raises(InferenceError, match="after 4 attempt") as info:
            make_client(server).complete(MESSAGES)
    assert info.value.attempts == 4 and info.value.status == 502
    assert len(server.requests) == 4


def test_honours_retry_after() -> None:
    with ScriptedServer([error(429, retry_after="1"), reply("ok")]) as server:
        completion = make_client(server).complete(MESSAGES)
    first, second = server.requests
    assert completion.attempts == 2
    assert second["time"] - first["time"] >= 1.0  # the header, not the 0.05 s backoff cap


def test_retry_after_ms_and_http_date() -> None:
    class Fake:
        def __init__(self, headers):
            self.response = type("R", (), {"headers": headers})()
    assert retry_after_s(Fake({"retry-after-ms": "250"})) == 0.25
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after_s(Fake({"retry-after": future})) <= 31
    assert retry_after_s(Fake({})) is None and retry_after_s(None) is None


def test_retry_after_is_capped() -> None:
    retry = FAST_RETRY.model_copy(update={"retry_after_max_s": 0.2})
    with ScriptedServer([error(429, retry_after="3600"), reply("ok")]) as server:
        start = time.monotonic()
        assert make_client(server, retry).complete(MESSAGES).text == "ok"
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("status", [400, 422])
def test_no_retry_on_bad_request(status: int) -> None:
    with ScriptedServer([error(status, message="prompt too long")]) as server:
        with pytest.raises(InferenceError, match=f"HTTP {status}") as info:
            make_client(server).complete(MESSAGES)
    assert info.value.attempts == 1 and len(server.requests) == 1


@pytest.mark.parametrize("status, words", [(401, "key was refused"), (402, "balance"),
                                           (403, "denied"), (404, "model id")])
def test_user_errors_are_not_retried(status: int, words: str) -> None:
    with ScriptedServer([error(status)]) as server:
        with pytest.raises(UserError, match=words) as info:
            make_client(server, api_key_env="SOME_KEY").complete(MESSAGES)
    assert len(server.requests) == 1
    assert "\n" not in str(info.value)


def test_timeout_then_retry() -> None:
    with ScriptedServer([slow(3.0), reply("in time")]) as server:
        start = time.monotonic()
        completion = make_client(server, timeout_s=0.5).complete(MESSAGES)
        elapsed = time.monotonic() - start
    assert completion.text == "in time" and completion.attempts == 2
    assert len(server.requests) == 2 and 0.5 <= elapsed < 2.5


def _refusing_port():
    """A TCP port on 127.0.0.1 that is bound but never listens: every connect is refused,
    and no other process can take the port while the socket is held."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def test_connection_refused_is_not_retried_and_is_the_users_to_fix() -> None:
    """No server: one request, then a UserError naming the address (no backoff waits)."""
    sock, port = _refusing_port()
    with sock:
        endpoint = ModelEndpoint(name="gone", base_url=f"http://127.0.0.1:{port}/v1",
                                 model="m", timeout_s=5)
        client = ChatClient(endpoint, "k", RetryPolicy(max_attempts=5, backoff_base_s=30))
        with pytest.raises(UserError, match=f"cannot reach http://127.0.0.1:{port}/v1 .*"
                                            "refused.*is the server running") as info:
            client.complete(MESSAGES)
    assert "\n" not in str(info.value)


def test_connection_refused_after_an_answer_is_one_requests_error() -> None:
    """Once the endpoint has answered, a refusal (the server went away) is recorded per
    request as an InferenceError, not retried, and does not stop the run."""
    with ScriptedServer([reply("first")]) as server:
        client = make_client(server, retry=RetryPolicy(max_attempts=5, backoff_base_s=30))
        assert client.complete(MESSAGES).text == "first"
    with pytest.raises(InferenceError, match="after 1 attempt"):
        client.complete(MESSAGES)


def test_reasoning_kept_apart_and_no_sampling_params() -> None:
    script = [reply("```python\nclass ModelNew: pass\n```", reasoning="let me think"),
              reply("answer", reasoning="vllm thought", reasoning_field="reasoning"),
              reply("<think>\ninline thought\n</think>\n\nfinal answer")]
    with ScriptedServer(script) as server:
        client = make_client(server, reasoning=True, temperature=0.6, top_p=0.95,
                             max_tokens=999, max_tokens_param="max_completion_tokens")
        deepseek, vllm, inline = (client.complete(MESSAGES) for _ in range(3))
    assert deepseek.text.startswith("```python") and deepseek.reasoning == "let me think"
    assert "think" not in deepseek.text
    assert (vllm.text, vllm.reasoning) == ("answer", "vllm thought")
    assert (inline.text, inline.reasoning) == ("final answer", "inline thought")
    body = server.requests[0]["body"]
    assert "temperature" not in body and "top_p" not in body
    assert body["max_completion_tokens"] == 999 and "max_tokens" not in body


def test_concurrency_limit() -> None:
    with ScriptedServer(default=reply("ok", delay_s=0.3)) as server:
        client = make_client(server, max_concurrency=2)
        threads = [threading.Thread(target=client.complete, args=(MESSAGES,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 6
    assert server.max_in_flight == 2
