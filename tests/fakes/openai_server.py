"""A fake OpenAI-compatible chat completions server on 127.0.0.1, for the real provider path.

    server = FakeOpenAIServer().start()
    server.reply_json({"title": "Engineer"})
    ...litellm.completion(model="openai/gpt-4o-mini", api_base=server.base_url, api_key=...)
    server.requests[0].body["messages"], server.requests[0].headers["authorization"]

Answers are scripted: each `reply_*` queues one answer, used by the next request in order;
with the queue empty it answers a plain text. Every request is recorded.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_TEXT = "A plain answer from the fake server."


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", []) if isinstance(self.body, dict) else []


@dataclass
class Scripted:
    status: int = 200
    payload: Any = None  # a dict sent as JSON, or bytes sent as they are
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a handler sleeping on a slow answer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout test) is expected, not news


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},  # stop() waits up to one interval
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    # --- the script ------------------------------------------------------------------------

    def reply_text(
        self,
        text: str,
        *,
        prompt_tokens: int = 12,
        completion_tokens: int = 7,
        report_usage: bool = True,
    ) -> None:
        payload = self._completion(
            {"role": "assistant", "content": text}, "stop", prompt_tokens, completion_tokens
        )
        if not report_usage:  # some OpenAI-compatible servers send no usage
            del payload["usage"]
        self._queue(payload)

    def reply_json(self, value: Any, **usage: int) -> None:
        self.reply_text(json.dumps(value), **usage)

    def reply_content(self, content: str, **usage: int) -> None:
        """Any content, e.g. text that is not the JSON that was asked for."""
        self.reply_text(content, **usage)

    def reply_tool_call(
        self,
        name: str,
        arguments: dict[str, Any] | str,
        *,
        prompt_tokens: int = 40,
        completion_tokens: int = 15,
    ) -> None:
        self.reply_tool_calls(
            [(name, arguments)], prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    def reply_tool_calls(
        self,
        calls: list[tuple[str, dict[str, Any] | str]],
        *,
        prompt_tokens: int = 40,
        completion_tokens: int | None = None,
    ) -> None:
        """One answer that calls functions (several: a reasoning loop's turn), each given as
        (name, arguments: a dict sent as JSON, or a string sent as it is)."""
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
                for name, arguments in calls
            ],
        }
        spent = 15 * len(calls) if completion_tokens is None else completion_tokens
        self._queue(self._completion(message, "tool_calls", prompt_tokens, spent))

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        kind: str = "server_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        payload = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self._script.append(Scripted(status=status, payload=payload, headers=headers or {}))

    def reply_slow(self, seconds: float, text: str = DEFAULT_TEXT) -> None:
        """Answer only after `seconds` (longer than the client's timeout, for timeouts)."""
        self.reply_text(text)
        self._script[-1].delay_s = seconds

    def reply_raw(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        self._script.append(
            Scripted(status=status, payload=body, headers={"Content-Type": content_type})
        )

    def _queue(self, payload: dict[str, Any]) -> None:
        self._script.append(Scripted(payload=payload))

    def _completion(
        self, message: dict[str, Any], finish_reason: str, prompt: int, completion: int
    ) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "set-per-request",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    # --- serving ---------------------------------------------------------------------------

    def _next(self) -> Scripted:
        with self._lock:
            if self._script:
                return self._script.popleft()
        scripted = Scripted()
        scripted.payload = self._completion(
            {"role": "assistant", "content": DEFAULT_TEXT}, "stop", 12, 7
        )
        return scripted

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet test output

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw or b"null")
                except ValueError:
                    body = raw.decode(errors="replace")
                with server._lock:
                    server.requests.append(
                        RecordedRequest(
                            method="POST",
                            path=self.path,
                            headers={k.lower(): v for k, v in self.headers.items()},
                            body=body,
                        )
                    )
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(
                        404,
                        {
                            "error": {
                                "message": f"no route {self.path}",
                                "type": "invalid_request_error",
                            }
                        },
                        {},
                    )
                    return
                scripted = server._next()
                if scripted.delay_s and server._stopping.wait(scripted.delay_s):
                    return
                payload = scripted.payload
                if isinstance(payload, dict) and payload.get("model") == "set-per-request":
                    payload = {**payload, "model": (body or {}).get("model", "fake")}
                self._send(scripted.status, payload, scripted.headers)

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    if "Content-Type" not in headers:
                        self.send_header("Content-Type", "application/json")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

        return Handler
