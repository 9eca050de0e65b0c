"""An OTLP/HTTP trace receiver on loopback for the benchmarks (`bench/engine.py --otlp`), in a
process of its own so its work is not counted as the worker's: it decodes each POST as an
ExportTraceServiceRequest, answers 200, and tells what it received at GET /stats.

    .venv/bin/python bench/otlp_sink.py   # prints the port it listens on, then serves
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

RECEIVED = {"requests": 0, "spans": 0, "bytes": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with LOCK:
            RECEIVED["requests"] += 1
            RECEIVED["spans"] += spans
            RECEIVED["bytes"] += len(body)
        self._answer(b"", "application/x-protobuf")

    def do_GET(self) -> None:  # noqa: N802
        with LOCK:
            body = json.dumps(RECEIVED).encode()
        self._answer(body, "application/json")

    def _answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_port, flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
