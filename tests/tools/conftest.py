"""A loopback HTTP server for http_request, the context an adapter is called with, and a
clean slate for the process-wide caches of the runner (permissions, OAuth2 tokens)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runs.engine.ports import ToolInvocation
from tools.access import DEFAULT_ACCESS
from tools.builtin import BUILTINS, ToolContext
from tools.credentials import DEFAULT_AUTHENTICATOR


def pytest_configure(config: pytest.Config) -> None:
    # The Celery rate-limit test is a reliability test; registered here too, so that
    # `pytest tests/tools` alone knows the marker.
    config.addinivalue_line(
        "markers",
        "reliability: real worker and server processes against PostgreSQL and a broker",
    )


@pytest.fixture(autouse=True)
def _fresh_runner_caches() -> Iterator[None]:
    """Each test starts with no cached permission or token (ids repeat across tests)."""
    DEFAULT_ACCESS.forget()
    DEFAULT_AUTHENTICATOR.forget_tokens()
    yield
    DEFAULT_ACCESS.forget()
    DEFAULT_AUTHENTICATOR.forget_tokens()


def context_for(
    tool: dict[str, Any] | str, *, key: str = "run-1:step-1:1", workspace_id: int = 1
) -> ToolContext:
    """The context the runner would pass; a built-in's name stands for its default tool."""
    definition = BUILTINS[tool].definition if isinstance(tool, str) else tool
    return ToolContext(
        tool=definition, idempotency_key=key, workspace_id=workspace_id, run_id="run-1"
    )


def invocation(
    tool: dict[str, Any] | str,
    arguments: dict[str, Any],
    *,
    key: str = "run-1:step-1:1",
    workspace_id: int = 1,
    sandbox: bool = False,
    caller_id: Any = None,
) -> ToolInvocation:
    definition = BUILTINS[tool].definition if isinstance(tool, str) else tool
    return ToolInvocation(
        tool=definition,
        arguments=arguments,
        idempotency_key=key,
        workspace_id=workspace_id,
        run_id="run-1",
        sandbox=sandbox,
        caller_id=caller_id,
    )


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    """What the server received, and where it listens."""

    port: int
    requests: list[Seen] = field(default_factory=list)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


def handler_for(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the test output clean
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server.requests.append(
                Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            path = self.path.split("?")[0]
            if path.startswith("/status/"):
                code = int(path.rsplit("/", 1)[1])
                self._send(code, b'{"error": "as asked"}', "application/json")
            elif path == "/text":
                self._send(200, "héllo wörld".encode(), "text/plain; charset=utf-8")
            elif path == "/big":
                self._send(200, b"x" * (100 * 1024), "text/plain")
            elif path == "/big.json":
                self._send(200, json.dumps(["y" * 1000] * 100).encode(), "application/json")
            elif path == "/nan.json":
                self._send(200, b'{"value": NaN}', "application/json")
            elif path == "/slow":
                time.sleep(1.0)
                with contextlib.suppress(OSError):  # the client gave up waiting: fine
                    self._send(200, b"late", "text/plain")
            elif path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "http://10.0.0.1/internal")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                echo = {
                    "method": self.command,
                    "path": self.path,
                    "json": json.loads(body) if body else None,
                }
                self._send(200, json.dumps(echo).encode(), "application/json", cookie=True)

        def _send(self, code: int, body: bytes, content_type: str, cookie: bool = False) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Request-Id", "req-42")
            if cookie:
                self.send_header("Set-Cookie", "session=secret-cookie")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    return Handler


@pytest.fixture(scope="session")
def _loopback_server() -> Iterator[LoopbackServer]:
    state = LoopbackServer(port=0)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def loopback(_loopback_server, settings) -> LoopbackServer:
    """A server on 127.0.0.1, allowed as a host, with private addresses allowed."""
    _loopback_server.requests.clear()
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    return _loopback_server
