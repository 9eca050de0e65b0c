"""A webhook receiver on loopback, and the signature check a receiver makes."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook receiver on 127.0.0.1: records each request's headers and body; answers
    `fail_first` requests with 500 (or sleeps `delay` seconds first), then 204."""

    def __init__(self, *, fail_first: int = 0, delay: float = 0.0):
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.delay = delay
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers.items()), body))
                if receiver.delay:
                    time.sleep(receiver.delay)
                failing = len(receiver.requests) <= receiver.fail_first
                self.send_response(500 if failing else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/run-ended?source=test"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(secret: str, headers: dict, body: bytes) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Hierarch-Signature"], expected)
