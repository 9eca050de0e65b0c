"""An OTLP/HTTP trace receiver on loopback: a real HTTP server that decodes each request as
OpenTelemetry's ExportTraceServiceRequest (with opentelemetry-proto's generated classes)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpReceiver:
    """Records each request's raw body and its spans; answers `status` (200 by default),
    after `delay` seconds."""

    def __init__(self, *, status: int = 200, delay: float = 0.0) -> None:
        self.bodies: list[bytes] = []
        self.requests: list[ExportTraceServiceRequest] = []
        self.status = status
        self.delay = delay
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._arrived:
                    receiver.bodies.append(body)
                    receiver.requests.append(request)
                    receiver._arrived.notify_all()
                time.sleep(receiver.delay)
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[Any]:
        """Every span received, in order."""
        return [
            span
            for request in self.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def wait(self, requests: int = 1, timeout: float = 20.0) -> bool:
        """Wait until `requests` requests arrived; False when they did not in time."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            return self._arrived.wait_for(
                lambda: len(self.requests) >= requests, max(0.0, deadline - time.monotonic())
            )


def attributes(span: Any) -> dict[str, Any]:
    """A received span's attributes as a plain dict (string arrays as lists)."""
    found: dict[str, Any] = {}
    for item in span.attributes:
        value = item.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            found[item.key] = [v.string_value for v in value.array_value.values]
        else:
            found[item.key] = getattr(value, kind)
    return found
