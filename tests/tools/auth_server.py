"""A loopback API behind an OAuth2 token endpoint, recording every request's headers.

    with AuthServer(client_id="hierarch", client_secret="…") as server:
        server.url("/token")          # POST: the client-credentials grant (HTTP Basic)
        server.url("/api/things")     # any method: 200 echo; 401 when a bearer is required
        server.url("/api/headers")    # 200 with the request's headers in the body
        server.url("/api/status/503") # that status
        server.requests               # what arrived: method, path, headers, form

`require_bearer` makes /api/ answer 401 unless the request carries a token the server issued
and has not revoked (`revoke_tokens`). `token_status` makes /token answer that status.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    form: dict[str, str]


@dataclass
class AuthServer:
    client_id: str = "hierarch-client"
    client_secret: str = "client-secret-for-tests"
    expires_in: Any = 3600
    require_bearer: bool = False
    token_status: int | None = None
    requests: list[Request] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    _valid: set[str] = field(default_factory=set)
    _count: Any = field(default_factory=lambda: itertools.count(1))
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def token_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path == "/token"]

    def api_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.startswith("/api/")]

    def revoke_tokens(self) -> None:
        self._valid.clear()

    def __enter__(self) -> AuthServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _issue(self) -> str:
        token = f"at-{next(self._count)}-{secrets.token_hex(12)}"
        self.issued.append(token)
        self._valid.add(token)
        return token

    def _client_ok(self, authorization: str) -> bool:
        if not authorization.startswith("Basic "):
            return False
        pair = base64.b64decode(authorization[6:]).decode()
        given_id, _, given_secret = pair.partition(":")
        return (unquote(given_id), unquote(given_secret)) == (
            self.client_id,
            self.client_secret,
        )


def _handler(server: AuthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            headers = {k.lower(): v for k, v in self.headers.items()}
            form = {k: v[0] for k, v in parse_qs(body).items()}
            server.requests.append(Request(self.command, self.path, headers, form))
            if self.path == "/token":
                self._token(headers, form)
            elif self.path.startswith("/api/"):
                self._api(headers)
            else:
                self._send(404, {"error": "not found"})

        def _token(self, headers: dict[str, str], form: dict[str, str]) -> None:
            if server.token_status is not None:
                self._send(server.token_status, {"error": "temporarily_unavailable"})
            elif not server._client_ok(headers.get("authorization", "")):
                # A careless server that echoes what it was sent: the client must not repeat it.
                self._send(
                    401,
                    {
                        "error": "invalid_client",
                        "error_description": f"unknown client {headers.get('authorization')}",
                    },
                )
            elif form.get("grant_type") != "client_credentials":
                self._send(400, {"error": "unsupported_grant_type"})
            else:
                answer = {"access_token": server._issue(), "token_type": "Bearer"}
                if server.expires_in is not None:
                    answer["expires_in"] = server.expires_in
                self._send(200, answer)

        def _api(self, headers: dict[str, str]) -> None:
            if server.require_bearer:
                authorization = headers.get("authorization", "")
                token = authorization.removeprefix("Bearer ")
                if not authorization.startswith("Bearer ") or token not in server._valid:
                    self._send(401, {"error": "invalid_token"})
                    return
            if self.path.startswith("/api/status/"):
                self._send(int(self.path.rsplit("/", 1)[1]), {"error": "as asked"})
            elif self.path == "/api/headers":
                self._send(200, {"headers": headers})
            else:
                self._send(200, {"ok": True, "path": self.path})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

    return Handler
