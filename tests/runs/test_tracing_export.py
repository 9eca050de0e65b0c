"""Traces exported as OpenTelemetry spans over OTLP/HTTP (runs/tracing.py), received by a real
HTTP server on loopback that decodes each request with opentelemetry-proto's classes. The
first tests drive a run in the test thread and export its trace here; the last ones go
through the inline executor, whose background thread exports once the root run's end is
committed."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from entities.models import Entity
from runs import background
from runs.models import LLMCall, Run, StepRun, ToolCall
from runs.services import run_start
from runs.tracing import (
    span_id_of,
    step_span_of,
    trace_export,
    trace_export_schedule,
    trace_sampled,
)
from tests.support.otlp import OtlpReceiver, attributes
from tests.support.queued_runs import Driver
from tests.support.runs_api import GOOD_INPUT, greeter


@pytest.fixture
def tracing(settings):
    """Export to whatever endpoint a test sets, at once: a short timeout for the receivers
    that fail."""

    def configure(endpoint: str, **more) -> dict:
        settings.HIERARCH_TRACING = {
            **settings.HIERARCH_TRACING,
            "ENDPOINT": endpoint,
            "SAMPLING_RATE": 1.0,
            "TIMEOUT_SECONDS": 2.0,
            **more,
        }
        return settings.HIERARCH_TRACING

    return configure


DEMO_INPUT = {
    "job_description": (
        "We are seeking a Senior Software Engineer to design and build distributed systems, "
        "mentor engineers and own critical services end to end across our platform."
    ),
    "company_name": "TechCorp",
}


def demo_run() -> Run:
    """The demo's video ad process, four levels deep, with model and tool calls."""
    call_command("setup_demo", stdout=None)
    process = Entity.objects.get(workspace__slug="demo", name="video_ad_creation_process")
    run = Driver().run(process, DEMO_INPUT)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    return run


def _ns(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _hex(span_id: int) -> bytes:
    return span_id.to_bytes(8, "big")


def _step_span(step: StepRun) -> int:
    """A step attempt's span: made from its key (run, step, pass, attempt)."""
    fields = ("run_id", "step_key", "iteration", "attempt")
    return step_span_of({name: getattr(step, name) for name in fields})


def _made_by(call: LLMCall | ToolCall) -> bytes:
    """The span a call hangs under: its step's, else its run's (a planning call)."""
    if call.step_id:
        return _hex(_step_span(call.step))
    return _hex(span_id_of("run", call.run_id))


# -- the spans ----------------------------------------------------------------------------------


def test_a_trace_is_one_span_per_run_step_and_call_under_the_run_trace(db, tracing):
    run = demo_run()
    with OtlpReceiver() as receiver:
        tracing(receiver.endpoint)
        assert trace_export(trace_id=run.trace_id)
    (request,) = receiver.requests
    spans = receiver.spans()
    runs = Run.objects.filter(trace_id=run.trace_id)
    steps = StepRun.objects.filter(run__trace_id=run.trace_id)
    model_calls = LLMCall.objects.filter(run__trace_id=run.trace_id)
    tool_calls = ToolCall.objects.filter(run__trace_id=run.trace_id)
    assert len(spans) == runs.count() + steps.count() + model_calls.count() + tool_calls.count()
    assert {span.trace_id for span in spans} == {run.trace_id.bytes}
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans)

    (resource,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert service["service.name"] == "hierarch"

    root = by_id[_hex(span_id_of("run", run.pk))]
    assert root.name == "invoke_agent video_ad_creation_process"
    assert root.parent_span_id == b""
    root_attributes = attributes(root)
    assert root_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root_attributes["hierarch.run.id"] == str(run.pk)
    assert root_attributes["hierarch.run.status"] == "COMPLETED"
    assert root_attributes["hierarch.span_annotations"] == ["video_production", "recruitment"]
    assert root.start_time_unix_nano == _ns(run.started_at)
    assert root.end_time_unix_nano == _ns(run.completed_at)

    # Every other run hangs under the step of its parent that started it: four levels.
    for child in runs.exclude(pk=run.pk):
        span = by_id[_hex(span_id_of("run", child.pk))]
        step = by_id[span.parent_span_id]
        assert step.name.startswith("step ")
        assert step.parent_span_id == _hex(span_id_of("run", child.parent_id))
    deepest = max(runs, key=lambda r: r.depth)
    assert deepest.depth == 3
    levels, span = 0, by_id[_hex(span_id_of("run", deepest.pk))]
    while span.parent_span_id:
        span = by_id[span.parent_span_id]
        levels += span.name.startswith("invoke_agent ")
    assert levels == 3

    for step in steps:
        span = by_id[_hex(_step_span(step))]
        assert span.name == f"step {step.name}"
        assert span.parent_span_id == _hex(span_id_of("run", step.run_id))


def test_model_and_tool_calls_carry_the_gen_ai_attributes_and_no_text(db, tracing):
    run = demo_run()
    with OtlpReceiver() as receiver:
        tracing(receiver.endpoint)
        assert trace_export(trace_id=run.trace_id)
    by_id = {span.span_id: span for span in receiver.spans()}

    model_calls = list(LLMCall.objects.filter(run__trace_id=run.trace_id))
    tool_calls = list(ToolCall.objects.filter(run__trace_id=run.trace_id))
    assert model_calls and tool_calls
    for call in model_calls:
        span = by_id[_hex(span_id_of("llm", call.pk))]
        assert span.name == f"chat {call.model_name}"
        assert span.parent_span_id == _made_by(call)
        found = attributes(span)
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.request.model"] == call.model_name
        assert found["gen_ai.provider.name"] == call.model_provider
        assert found["gen_ai.usage.cost"] == float(call.cost_usd)
        assert found["gen_ai.usage.input_tokens"] == call.prompt_tokens
        assert found["gen_ai.usage.output_tokens"] == call.completion_tokens
        assert span.end_time_unix_nano == _ns(call.timestamp)
        assert span.end_time_unix_nano - span.start_time_unix_nano == call.latency_ms * 1_000_000
    for call in tool_calls:
        span = by_id[_hex(span_id_of("tool", call.pk))]
        assert span.name == f"execute_tool {call.tool_id}"
        assert span.parent_span_id == _made_by(call)
        found = attributes(span)
        assert found["gen_ai.operation.name"] == "execute_tool"
        assert found["gen_ai.tool.name"] == call.tool_id

    # Metadata only: no prompt, answer, input, output or tool argument leaves.
    (body,) = receiver.bodies
    for text in [DEMO_INPUT["job_description"][:40], DEMO_INPUT["company_name"]]:
        assert text.encode() not in body
    texts = [t for c in model_calls for t in (c.input_prompt, c.output_response) if len(t) > 80]
    assert texts
    for text in texts:  # the middle of each prompt and answer (their ends may name a step)
        assert text[len(text) // 2 - 30 : len(text) // 2 + 30].encode() not in body
    keys = {key for span in receiver.spans() for key in attributes(span)}
    assert not {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt"} & keys
    assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & keys


def test_a_failed_step_marks_its_span_and_the_run_span_as_errors(db, acme, tracing):
    entity = greeter(acme)
    run = Driver().run(entity, {"company_name": "TechCorp"})  # a required field missing
    assert run.status == "FAILED"
    with OtlpReceiver() as receiver:
        tracing(receiver.endpoint)
        assert trace_export(trace_id=run.trace_id)
    (span,) = [s for s in receiver.spans() if s.span_id == _hex(span_id_of("run", run.pk))]
    assert span.status.code == span.status.STATUS_CODE_ERROR
    assert attributes(span)["error.type"] == run.error_code


# -- sampling and settings ----------------------------------------------------------------------


def test_sampling_keeps_the_rate_by_trace_id_as_opentelemetry_decides(tracing):
    tracing("http://127.0.0.1:9/v1/traces", SAMPLING_RATE=0.25)
    ids = [uuid.UUID(int=n * 0x9E3779B97F4A7C15F39CC0605CEDC835 % 2**128) for n in range(1, 2001)]
    kept = [trace_id for trace_id in ids if trace_sampled(trace_id)]
    assert 400 < len(kept) < 600
    assert kept == [trace_id for trace_id in ids if trace_sampled(trace_id)]
    sampler = TraceIdRatioBased(0.25)
    assert all(sampler.should_sample(None, t.int, "").decision.is_sampled() for t in kept)

    tracing("http://127.0.0.1:9/v1/traces", SAMPLING_RATE=0.0)
    assert not any(trace_sampled(trace_id) for trace_id in ids)
    assert not trace_export_schedule(trace_id=ids[0], status="COMPLETED")
    tracing("http://127.0.0.1:9/v1/traces", SAMPLING_RATE=1.0)
    assert not trace_export_schedule(trace_id=ids[0], status="BLOCKED")  # not an end


# -- through the inline executor ----------------------------------------------------------------


def ran_inline(entity: Entity, input_data: dict, timeout: float = 30.0) -> Run:
    """A run started as the console starts one, waited on until it ends."""
    run = run_start(entity=entity, input_data=input_data)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("COMPLETED", "FAILED", "CANCELLED"):
            return run
        time.sleep(0.02)
    raise AssertionError(f"the run is still {run.status}")


@pytest.mark.django_db(transaction=True)
def test_a_run_executed_inline_is_exported_once_its_root_ends(acme, tracing, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    with OtlpReceiver() as receiver:
        tracing(receiver.endpoint)
        run = ran_inline(greeter(acme), GOOD_INPUT)
        assert receiver.wait(1), "no trace arrived"
        assert background.settle(10)
    assert run.status == "COMPLETED"
    assert len(receiver.requests) == 1
    names = sorted(span.name for span in receiver.spans())
    assert "invoke_agent greeter" in names
    assert any(name.startswith("chat ") for name in names)
    assert {span.trace_id for span in receiver.spans()} == {run.trace_id.bytes}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("rate", [None, 0.0])
def test_nothing_is_sent_without_an_endpoint_or_at_rate_zero(
    acme, tracing, settings, monkeypatch, rate
):
    settings.HIERARCH_EXECUTOR = "inline"
    with OtlpReceiver() as receiver:
        # The exporter would read these itself: the settings decide, not the exporter.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint[: -len("/v1/traces")])
        if rate is None:
            tracing("")
        else:
            tracing(receiver.endpoint, SAMPLING_RATE=rate)
        run = ran_inline(greeter(acme), GOOD_INPUT)
        assert background.settle(10)
        if rate is None:
            assert not trace_export(trace_id=run.trace_id)
        assert not receiver.wait(1, timeout=0.5)
    assert run.status == "COMPLETED"
    assert receiver.requests == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("receiver", ["failing", "slow", "down"])
def test_a_receiver_that_fails_is_slow_or_is_down_neither_fails_nor_slows_the_run(
    acme, tracing, caplog, receiver
):
    caplog.set_level(logging.WARNING, logger="runs.tracing")
    entity = greeter(acme)
    Driver().run(entity, GOOD_INPUT)  # the first model call of a process imports litellm
    # The slow receiver answers 500 after 2.5 s: the run, driven in this thread where the
    # engine's after-commit work runs, must be over long before.
    with OtlpReceiver(status=500, delay=2.5 if receiver == "slow" else 0.0) as answering:
        endpoint = answering.endpoint
        if receiver == "down":
            endpoint = f"http://user:hunter2@127.0.0.1:{_closed_port()}/v1/traces?key=sekrit"
        tracing(endpoint, TIMEOUT_SECONDS=4.0)
        started = time.monotonic()
        run = Driver().run(entity, GOOD_INPUT)
        took = time.monotonic() - started
        assert background.settle(15)
    assert run.status == "COMPLETED" and run.error_code == ""
    assert took < 1.5, took  # the run did not wait for the export
    if receiver != "down":
        assert len(answering.requests) == 1
    (warning,) = [r for r in caplog.records if "not exported" in r.getMessage()]
    assert str(run.trace_id) in warning.getMessage()
    assert "hunter2" not in warning.getMessage() and "sekrit" not in warning.getMessage()
    run.refresh_from_db()
    assert run.status == "COMPLETED"
