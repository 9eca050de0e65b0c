"""`observability.tracing.trace_id_propagation`: the calls a run makes carry the W3C
`traceparent` of its trace and step (the built-in HTTP tool against a server on loopback, a
real provider's model calls against a fake OpenAI server on loopback), the same ids the
OpenTelemetry export gives the trace and the step; an entity that says false sends none, and
its child runs are exported as traces of their own, linked to the step that started them,
while the database keeps one trace."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runs.engine.observability import step_span_id
from runs.models import Run, StepRun
from runs.tracing import span_id_of, step_span_of, trace_export
from tests.factories import tool_definition
from tests.support.otlp import OtlpReceiver
from tests.support.runs import step
from tests.support.worlds import MemoryWorld, OrmWorld, World, io

pytestmark = pytest.mark.smoke


class HeaderServer:
    """A server on 127.0.0.1 that answers every request with `{}` and keeps its headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        seen = self.headers

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                seen.append({k.lower(): v for k, v in self.headers.items()})
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hello"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(settings) -> Iterator[HeaderServer]:
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    running = HeaderServer()
    yield running
    running.close()


@pytest.fixture(params=["memory", pytest.param("orm", marks=pytest.mark.django_db)])
def world(request: pytest.FixtureRequest) -> World:
    if request.param == "memory":
        return MemoryWorld()
    return OrmWorld(request.getfixturevalue("acme"))


def tracing(propagation: bool | None) -> dict:
    return {"tracing": {} if propagation is None else {"trace_id_propagation": propagation}}


def fetcher(world: World, name: str, url: str, propagation: bool | None = None, **more) -> str:
    """One HTTP tool step (step id s1) calling `url`."""
    fetch = tool_definition(
        "fetch",
        implementation="http_request",
        function_schema={
            "name": "fetch",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}, "headers": {"type": "object"}},
                "required": ["url"],
            },
        },
    )
    each = step(1, "Fetch", "TOOL_CALL", tool_id="fetch")
    each["input_mapping"] = {"url": url, **more}
    return world.add(
        name,
        tools=[fetch],
        planning={"static_plan": {"enabled": True, "steps": [each]}},
        observability=tracing(propagation),
    )


def parsed(header: str) -> tuple[str, int]:
    """A traceparent's trace id (32 hex digits) and span id."""
    version, trace, span, flags = header.split("-")
    assert (version, flags, len(trace), len(span)) == ("00", "01", 32, 16)
    return trace, int(span, 16)


def hex_of(run_id: str) -> str:
    return run_id.replace("-", "")


# -- the HTTP tool --------------------------------------------------------------------------------


def test_the_http_tool_sends_the_runs_trace_and_the_steps_span(world, server):
    run = world.run(fetcher(world, "fetcher", server.url), {})

    assert world.status(run) == "COMPLETED", world.error(run)
    (seen,) = server.headers
    trace, span = parsed(seen["traceparent"])
    assert trace == hex_of(world.trace(run))
    assert span == step_span_id(run, "s1", 1, 1)


def test_true_says_what_the_default_says(world, server):
    runs = [
        world.run(fetcher(world, "by_default", server.url), {}),
        world.run(fetcher(world, "said_true", server.url, propagation=True), {}),
    ]
    sent = [parsed(h["traceparent"]) for h in server.headers]
    assert sent == [(hex_of(run), step_span_id(run, "s1", 1, 1)) for run in runs]


def test_false_sends_no_traceparent_and_leaves_the_arguments_headers_as_they_are(world, server):
    run = world.run(fetcher(world, "quiet", server.url, propagation=False), {})
    mine = "00-11111111111111111111111111111111-2222222222222222-01"
    world.run(
        fetcher(world, "quiet_but_told", server.url, False, headers={"traceparent": mine}), {}
    )

    assert world.status(run) == "COMPLETED", world.error(run)
    first, second = server.headers
    assert "traceparent" not in first
    assert second["traceparent"] == mine  # the caller's own, not the run's


def test_true_replaces_a_traceparent_the_arguments_set(world, server):
    mine = "00-11111111111111111111111111111111-2222222222222222-01"
    run = world.run(fetcher(world, "told", server.url, headers={"traceparent": mine}), {})
    (seen,) = server.headers
    assert parsed(seen["traceparent"])[0] == hex_of(world.trace(run))


def quiet_boss(world: World, url: str) -> str:
    """quiet_boss (false) → relay (an AGENT) → fetcher: below the boss, a trace of its own."""
    fetcher(world, "deep_fetcher", url)
    world.add("relay", "AGENT", children=["deep_fetcher"])
    return world.add("quiet_boss", "AGENT", children=["relay"], observability=tracing(False))


def test_below_an_entity_that_says_false_the_calls_carry_the_trace_of_its_child(world, server):
    run = world.run(quiet_boss(world, server.url), {})

    assert world.status(run) == "COMPLETED", world.error(run)
    (relay,) = world.children(run)
    (deep,) = world.children(relay)
    assert world.trace(deep) == world.trace(run)  # one trace in the database
    (seen,) = server.headers
    trace, span = parsed(seen["traceparent"])
    assert trace == hex_of(relay)  # the trace the boss's child started
    assert span == step_span_id(deep, "s1", 1, 1)


# -- the export -----------------------------------------------------------------------------------


def _hex(span: int) -> bytes:
    return span.to_bytes(8, "big")


def _step_row(run_id: str) -> dict:
    row = StepRun.objects.get(run_id=run_id)
    return {"run_id": row.run_id, "step_key": row.step_key, "iteration": 1, "attempt": 1}


@pytest.mark.django_db
def test_the_export_names_the_span_the_traceparent_named(acme, server, settings):
    world = OrmWorld(acme)
    run = world.run(fetcher(world, "fetcher", server.url), {})
    (seen,) = server.headers
    trace, span = parsed(seen["traceparent"])

    with OtlpReceiver() as receiver:
        settings.HIERARCH_TRACING = {
            **settings.HIERARCH_TRACING,
            "ENDPOINT": receiver.endpoint,
            "SAMPLING_RATE": 1.0,
        }
        assert trace_export(trace_id=run)
    by_id = {s.span_id: s for s in receiver.spans()}
    called_from = by_id[_hex(span)]
    assert called_from.name == "step Fetch"
    assert called_from.trace_id.hex() == trace
    assert span == step_span_of(_step_row(run))


@pytest.mark.django_db
def test_false_exports_the_childs_subtree_as_a_trace_of_its_own_linked_to_its_step(
    acme, server, settings
):
    world = OrmWorld(acme)
    run = world.run(quiet_boss(world, server.url), {})
    (relay,) = world.children(run)
    (deep,) = world.children(relay)
    assert {str(r.trace_id) for r in Run.objects.filter(trace_id=run)} == {run}
    assert Run.objects.get(pk=run).export_trace_id is None
    assert str(Run.objects.get(pk=relay).export_trace_id) == relay
    assert str(Run.objects.get(pk=deep).export_trace_id) == relay

    with OtlpReceiver() as receiver:
        settings.HIERARCH_TRACING = {
            **settings.HIERARCH_TRACING,
            "ENDPOINT": receiver.endpoint,
            "SAMPLING_RATE": 1.0,
        }
        assert trace_export(trace_id=run)
    spans = receiver.spans()
    by_name = {s.name: s for s in spans}
    boss, relay_span, deep_span = (
        by_name["invoke_agent quiet_boss"],
        by_name["invoke_agent relay"],
        by_name["invoke_agent deep_fetcher"],
    )
    root_trace, own_trace = bytes.fromhex(hex_of(run)), bytes.fromhex(hex_of(relay))
    assert boss.trace_id == root_trace
    assert relay_span.trace_id == deep_span.trace_id == own_trace
    # The boss's subtree ends at its own steps; the relay begins a trace, linked to the
    # boss's step that started it.
    assert {s.trace_id for s in spans} == {root_trace, own_trace}
    assert relay_span.parent_span_id == b""
    (link,) = relay_span.links
    boss_step = step_span_of(_step_row(run))
    assert (link.trace_id, link.span_id) == (root_trace, _hex(boss_step))
    assert by_name["step relay"].span_id == _hex(boss_step)
    # Below the relay, everything hangs as before, in the relay's trace.
    assert deep_span.parent_span_id == _hex(step_span_of(_step_row(relay)))
    assert not deep_span.links
    assert boss.span_id == _hex(span_id_of("run", run))
    (seen,) = server.headers
    assert parsed(seen["traceparent"])[0] == hex_of(relay)


# -- model calls ----------------------------------------------------------------------------------


@pytest.fixture
def remote(monkeypatch, openai_server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_BASE", openai_server.base_url)
    return openai_server


def answerer(world: World, name: str, propagation: bool | None) -> str:
    """An ACTION on a real provider's model: one THOUGHT step (its key: answer)."""
    return world.add(
        name,
        io_contract=io(None, answer="string"),
        logic_gate={"reasoning_config": {"model_provider": "openai", "model_name": "gpt-4o-mini"}},
        observability=tracing(propagation),
    )


@pytest.mark.django_db
def test_a_real_providers_model_call_carries_the_trace_unless_the_entity_says_false(acme, remote):
    world = OrmWorld(acme)
    remote.reply_json({"answer": "traced"})
    remote.reply_json({"answer": "untraced"})
    traced = world.run(answerer(world, "traced", None), {})
    untraced = world.run(answerer(world, "untraced", False), {})

    assert world.output(traced) == {"answer": "traced"}
    assert world.output(untraced) == {"answer": "untraced"}
    first, second = remote.requests
    trace, span = parsed(first.headers["traceparent"])
    assert trace == hex_of(traced)
    assert span == step_span_id(traced, "answer", 1, 1)
    assert "traceparent" not in second.headers
    assert json.dumps(second.body).count("traceparent") == 0  # a header, never in the body
