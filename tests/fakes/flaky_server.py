"""A loopback HTTP server that fails a given number of times, then succeeds."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def flaky_server() -> Iterator[tuple[str, Counter]]:
    """GET /fail/N/<name> answers 503 the first N times for each name, then 200. Yields the
    base URL and the count of requests per name."""
    seen: Counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            _, _, failures, name = self.path.split("/", 3)
            seen[name] += 1
            code = 503 if seen[name] <= int(failures) else 200
            body = b'{"ok": true}' if code == 200 else b'{"error": "busy"}'
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
