"""ChatClient: one OpenAI-compatible endpoint, called from many threads.

    client = ChatClient(endpoint, api_key, retry=RetryPolicy())
    completion = client.complete(messages)        # -> Completion, or raises (below)

Share one client per endpoint (it holds `max_concurrency` slots while requests are in
flight). Timeouts, dropped connections, 408/409/429/5xx are retried with backoff or
Retry-After; 401-404 and a server never reached are UserError; other failures, and
retries run out, are InferenceError (the run records it and moves on).
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from typing import Any

import openai
from pydantic import BaseModel, Field
from tenacity import (RetryCallState, Retrying, retry_if_exception, stop_after_attempt,
                      wait_random_exponential)

from kb_eval.errors import UserError
from kb_eval.inference.completion import Completion
from kb_eval.inference.endpoints import ModelEndpoint

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429}
USER_STATUS = {401: "the API key was refused", 402: "the account has insufficient balance",
               403: "access was denied", 404: "not found (check base_url and the model id)"}


class InferenceError(Exception):
    """A request that failed for good (after retries, or not retryable)."""

    def __init__(self, message: str, *, attempts: int, status: int | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.status = status


class RetryPolicy(BaseModel):
    max_attempts: int = Field(6, ge=1, description="requests per call, the first included")
    backoff_base_s: float = Field(2.0, gt=0, description="exponential backoff multiplier")
    backoff_max_s: float = Field(60.0, gt=0, description="cap on one backoff wait")
    retry_after_max_s: float = Field(300.0, ge=0, description="cap on an honoured Retry-After")


def is_unreachable(exc: BaseException) -> bool:
    """No connection could be made (refused, unknown host): waiting will not help."""
    if not isinstance(exc, openai.APIConnectionError) or isinstance(exc, openai.APITimeoutError):
        return False
    return any(type(e).__name__ == "ConnectError" for e in _causes(exc))


def _causes(exc: BaseException | None):
    """exc and what it was raised from, innermost last."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # timeouts are a subclass
        return not is_unreachable(exc)
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUS or exc.status_code >= 500
    return False


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds asked for by a Retry-After / retry-after-ms header of an error response."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class WaitRetryAfterOrBackoff:
    """tenacity wait: the server's Retry-After when given, else exponential backoff + jitter."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.backoff = wait_random_exponential(multiplier=policy.backoff_base_s,
                                               max=policy.backoff_max_s)

    def __call__(self, state: RetryCallState) -> float:
        asked = retry_after_s(state.outcome.exception() if state.outcome else None)
        if asked is not None:
            return min(asked, self.policy.retry_after_max_s)
        return self.backoff(state)


class ChatClient:
    def __init__(self, endpoint: ModelEndpoint, api_key: str, retry: RetryPolicy | None = None):
        self.endpoint = endpoint
        self.retry = retry or RetryPolicy()
        self._slots = threading.BoundedSemaphore(endpoint.max_concurrency)
        self._reached = False  # once it has answered at all, a refusal is one request's
        self._sdk = openai.OpenAI(base_url=endpoint.base_url, api_key=api_key,
                                  timeout=endpoint.timeout_s, max_retries=0)

    def complete(self, messages: list[dict[str, str]]) -> Completion:
        """Ask once (retrying transient failures); see the module docstring for errors."""
        attempts = 0

        def attempt() -> Completion:
            nonlocal attempts
            attempts += 1
            return self._request(messages, attempts)

        retrying = Retrying(stop=stop_after_attempt(self.retry.max_attempts),
                            wait=WaitRetryAfterOrBackoff(self.retry),
                            retry=retry_if_exception(is_retryable),
                            before_sleep=self._log_retry, reraise=True)
        try:
            completion = retrying(attempt)
        except openai.APIStatusError as e:
            self._reached = True
            raise self._final_error(e, attempts) from e
        except openai.APIError as e:
            if is_unreachable(e) and not self._reached:
                root = list(_causes(e))[-1]
                raise UserError(f"{self.endpoint.name}: cannot reach {self.endpoint.base_url} "
                                f"({root}): is the server running?") from e
            raise InferenceError(f"{self.endpoint.name}: {_describe(e)} "
                                 f"(after {attempts} attempt(s))", attempts=attempts) from e
        self._reached = True
        return completion

    def _request(self, messages: list[dict[str, str]], attempt: int) -> Completion:
        ep = self.endpoint
        with self._slots:
            start = time.monotonic()
            response = self._sdk.chat.completions.create(
                model=ep.model, messages=messages, extra_body=ep.extra_body,
                **ep.request_params())
            latency = time.monotonic() - start
        return self._to_completion(response, latency, attempt)

    def _to_completion(self, response: Any, latency: float, attempts: int) -> Completion:
        if not response.choices:
            raise InferenceError(f"{self.endpoint.name}: the answer has no choices",
                                 attempts=attempts)
        choice = response.choices[0]
        text, reasoning = split_reasoning(choice.message)
        usage = response.usage
        prompt_tokens = (usage.prompt_tokens or 0) if usage else 0
        completion_tokens = (usage.completion_tokens or 0) if usage else 0
        return Completion(text=text, reasoning=reasoning, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, latency_s=latency,
                          attempts=attempts, finish_reason=choice.finish_reason,
                          cost=self.endpoint.cost(prompt_tokens, completion_tokens))

    def _final_error(self, e: openai.APIStatusError, attempts: int) -> Exception:
        ep = self.endpoint
        if e.status_code in USER_STATUS:
            key = f" (key from {ep.api_key_env})" if ep.api_key_env else ""
            return UserError(f"{ep.name}: {USER_STATUS[e.status_code]}{key}: "
                             f"HTTP {e.status_code} from {ep.base_url} for model {ep.model!r}")
        return InferenceError(f"{ep.name}: {_describe(e)} (after {attempts} attempt(s))",
                              attempts=attempts, status=e.status_code)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s: %s; retry %d in %.1fs", self.endpoint.name, _describe(exc),
                    state.attempt_number, wait)


def split_reasoning(message: Any) -> tuple[str, str | None]:
    """(answer, reasoning) of a chat message: `reasoning_content` (DeepSeek, older vLLM),
    `reasoning` (newer vLLM/SGLang), or a leading <think>...</think> block in the text."""
    text = message.content or ""
    extra = message.model_extra or {}
    found = extra.get("reasoning_content") or extra.get("reasoning")
    reasoning = str(found) if found else None
    stripped = text.lstrip()
    if stripped.startswith("<think>") and "</think>" in stripped:
        thought, _, text = stripped[len("<think>"):].partition("</think>")
        reasoning = "\n".join(r for r in (reasoning, thought.strip()) if r)
        text = text.lstrip()
    return text, reasoning


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]
