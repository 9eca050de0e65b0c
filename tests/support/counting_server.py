"""A loopback HTTP server that counts the requests it gets: to prove something was never
fetched. It answers every GET with a JSON Schema holding a canary, so a fetch would also
show in what the caller answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CANARY = "fetched-canary-7f3c2a"


@dataclass
class CountingServer:
    port: int
    paths: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def counting_server() -> Iterator[CountingServer]:
    """A server on 127.0.0.1 (a free port), stopped on leaving."""
    seen = CountingServer(port=0)
    body = json.dumps({"type": "string", "const": CANARY}).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the test output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            seen.paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    seen.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
