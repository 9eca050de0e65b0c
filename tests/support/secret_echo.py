"""A loopback server (127.0.0.1 only) that echoes the bearer token it is sent, encoded as
servers do: JSON with `\\/` (PHP) or `\\u0026` (Go) escapes, every character `\\u00XX`,
percent-encoded, base64 (standard and URL-safe, bare or inside `user:token` at each of the
three alignments), hex, in a header, and in an error's reason phrase."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus


def _json(value: Any) -> str:
    return json.dumps(value)


def _php(token: str) -> str:
    return _json({"echo": token}).replace("/", "\\/")


def _go(token: str) -> str:
    return _json({"echo": token}).replace("&", "\\u0026").replace("+", "\\u002b")


def _every_character(token: str) -> str:
    return '{"echo": "' + "".join(f"\\u{ord(c):04X}" for c in token) + '"}'


def _in_text(token: str) -> str:
    # Not declared JSON: the escaped body stays text, as it was sent.
    return "debug: " + _php(token) + " " + _every_character(token)


def _basic(token: str) -> str:
    pairs = [f"{user}:{token}" for user in ("u", "us", "usr")]
    return _json({"basic": [base64.b64encode(p.encode()).decode() for p in pairs]})


# path: (content type, body from the token)
ECHOES: dict[str, tuple[str, Callable[[str], str]]] = {
    "/php": ("application/json", _php),
    "/go": ("application/json", _go),
    "/unicode": ("application/json", _every_character),
    "/text": ("text/plain", _in_text),
    "/quote": ("application/json", lambda t: _json({"url": "/x?k=" + quote(t, safe="")})),
    "/quote-plus": ("application/json", lambda t: _json({"form": "k=" + quote_plus(t)})),
    "/base64": ("application/json", lambda t: _json({"b": base64.b64encode(t.encode()).decode()})),
    "/base64url": (
        "application/json",
        lambda t: _json({"b": base64.urlsafe_b64encode(t.encode()).decode().rstrip("=")}),
    ),
    "/basic": ("application/json", _basic),
    "/hex": (
        "application/json",
        lambda t: _json({"h": t.encode().hex(), "H": t.encode().hex().upper()}),
    ),
    "/key": ("application/json", lambda t: _json({t: "the token as a key"})),
}


def echoed_forms(token: str) -> list[str]:
    """Every body the server sends for `token`, and each encoded form inside them."""
    bodies = [make(token) for _, make in ECHOES.values()]
    forms = [
        quote(token, safe=""),
        quote_plus(token),
        base64.b64encode(token.encode()).decode(),
        base64.urlsafe_b64encode(token.encode()).decode().rstrip("="),
        token.encode().hex(),
        token.encode().hex().upper(),
        *json.loads(_basic(token))["basic"],
        json.dumps(token)[1:-1].replace("/", "\\/"),
        "".join(f"\\u{ord(c):04X}" for c in token),
    ]
    return [*bodies, *forms]


class SecretEcho:
    """`with SecretEcho() as echo:` serves on 127.0.0.1; `echo.url(path)`."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{path}"

    def __enter__(self) -> SecretEcho:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        echo = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                echo.paths.append(self.path)
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                if self.path == "/refused":
                    # The reason phrase is the error message's; the body JSON-escaped.
                    body = _php(token).encode()
                    self.send_response(400, f"Bad key {quote(token, safe='')}")
                    content_type = "application/json"
                else:
                    content_type, make = ECHOES[self.path]
                    body = make(token).encode()
                    self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Request-Id", base64.b64encode(token.encode()).decode())
                self.send_header("Location", "/next?token=" + quote_plus(token))
                self.end_headers()
                self.wfile.write(body)

        return Handler
