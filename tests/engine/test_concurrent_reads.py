"""READ calls a model asks for in one turn of the reasoning loop are made at the same time
where they wait on the network (runs/engine/tool_steps.py `invoke_tools`, tools/runner.py
`call_all`), on both stores: their requests overlap at a real server on loopback, each is
recorded once, and the model reads their results in the order it asked for them; a WRITE
call among them keeps its place."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.factories import tool_definition
from tests.support.react import REACT
from tests.support.worlds import World, io

PAUSE_S = 0.3


class Server:
    """A server on loopback whose every answer takes PAUSE_S; it notes when each request
    came in and when it was answered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                began = time.monotonic()
                time.sleep(PAUSE_S)
                body = json.dumps({"path": self.path}).encode()
                if self.path == "/nul":  # text no database column takes, escaped in JSON
                    body = b'{"x": "a\\u0000b", "\\ud800": 1}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with server.lock:
                    server.seen.append((self.path, began, time.monotonic()))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server(settings) -> Iterator[Server]:
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    running = Server()
    thread = threading.Thread(target=running.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield running
    running.httpd.shutdown()
    running.httpd.server_close()


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def fetcher(tool_id: str, about: str, permissions: str = "READ") -> dict:
    """An http_request tool the model calls with a `url` (taken from the run's input)."""
    return tool_definition(
        tool_id,
        implementation="http_request",
        permissions=permissions,
        function_schema={
            "name": tool_id,
            "description": f"Fetch the {about} from a URL",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        },
    )


def analyst(world: World, *tools: dict) -> str:
    return world.add(
        "analyst",
        "AGENT",
        tools=list(tools),
        logic_gate=REACT,
        io_contract=io({"url": "string", "question": "string"}, answer="string"),
    )


QUESTION = "What do the prices and the reviews say?"


def test_the_read_calls_of_one_turn_are_made_at_the_same_time(world, server):
    analyst(world, fetcher("fetch_prices", "prices"), fetcher("fetch_reviews", "reviews"))
    run = world.run("analyst", {"url": server.url("/data"), "question": QUESTION})

    assert world.status(run) == "COMPLETED", world.error(run)
    (first, a_began, a_ended), (second, b_began, b_ended) = sorted(server.seen, key=lambda s: s[1])
    assert b_began < a_ended  # the second request went out before the first was answered
    calls = world.tool_calls(run)
    assert [c.tool_id for c in calls] == ["fetch_prices", "fetch_reviews"]
    assert all(c.success for c in calls)
    assert world.model_call_count(run) == 2
    answer = world.output(run)["answer"]
    assert answer.startswith("The tools returned:") and answer.count('"path": "/data"') == 2


def test_a_write_call_between_reads_keeps_its_place(world, server):
    analyst(
        world,
        fetcher("fetch_prices", "prices"),
        fetcher("post_reviews", "reviews", permissions="WRITE"),
        fetcher("fetch_stock", "stock levels, prices and reviews"),
    )
    run = world.run("analyst", {"url": server.url("/data"), "question": QUESTION})

    assert world.status(run) == "COMPLETED", world.error(run)
    calls = world.tool_calls(run)
    assert [c.tool_id for c in calls] == ["fetch_prices", "post_reviews", "fetch_stock"]
    spans = sorted(server.seen, key=lambda s: s[1])
    assert len(spans) == 3
    for (_, _, ended), (_, began, _) in zip(spans, spans[1:], strict=False):
        assert began >= ended  # one READ on each side of the WRITE: nothing to overlap


def test_a_server_that_answers_nul_or_a_lone_surrogate_is_recorded_and_heard(world, server):
    analyst(world, fetcher("fetch_prices", "prices"))
    run = world.run("analyst", {"url": server.url("/nul"), "question": QUESTION})

    assert world.status(run) == "COMPLETED", world.error(run)
    (call,) = world.tool_calls(run)
    assert call.success  # its record was written
    answer = world.output(run)["answer"]
    assert '"body": {"x": "a\ufffdb", "\ufffd": 1}' in answer
