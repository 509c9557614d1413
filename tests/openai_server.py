"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests (no internet, no mocks).

    with ScriptedServer([reply("hi"), error(429, retry_after="1"), ...]) as server:
        client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)

Each POST to `.../chat/completions` takes the next `Reply` of the script (in arrival order);
when the script is used up, `default` answers (a plain "ok" answer unless given). Every
request is recorded in `server.requests` (path, headers, parsed JSON body, arrival time).
`server.max_in_flight` is the most requests that were being handled at the same time.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: HTTP status, JSON body, extra headers, delay before answering."""
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def reply(text: str | None, *, reasoning: str | None = None, finish_reason: str = "stop",
          prompt_tokens: int = 11, completion_tokens: int = 22, delay_s: float = 0.0,
          reasoning_field: str = "reasoning_content") -> Reply:
    """A normal chat completion; `reasoning` goes in DeepSeek's `reasoning_content` field."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message[reasoning_field] = reasoning
    body = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return Reply(200, body, delay_s=delay_s)


def error(status: int, *, retry_after: str | None = None, message: str = "scripted error") -> Reply:
    """An OpenAI-style error body with `status`; `retry_after` sets the Retry-After header."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"message": message, "type": "test_error", "code": status}}
    return Reply(status, body, headers)


def slow(delay_s: float, text: str = "too late") -> Reply:
    """A normal answer sent only after `delay_s` (past the client's timeout in tests)."""
    return reply(text, delay_s=delay_s)


class ScriptedServer:
    def __init__(self, script: list[Reply] | None = None, default: Reply | None = None):
        self.script = list(script or [])
        self.default = default or reply("ok")
        self.requests: list[dict[str, Any]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # wakes handlers sleeping on a slow reply
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            return self.script.pop(0) if self.script else self.default

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                record = {"path": self.path, "headers": dict(self.headers),
                          "body": json.loads(raw or b"{}"), "time": time.monotonic()}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                scripted = server._next_reply(record)
                try:
                    if scripted.delay_s and server._closing.wait(scripted.delay_s):
                        return
                    self._send(scripted)
                finally:
                    server._done()

            def _send(self, scripted: Reply) -> None:
                data = json.dumps(scripted.body).encode()
                try:
                    self.send_response(scripted.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in scripted.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        return Handler
