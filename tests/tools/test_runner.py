"""RegistryToolRunner: argument validation, routing to an adapter or its sandbox, errors."""

from __future__ import annotations

import json
import logging

import pytest

from runs.engine.ports import VALIDATION_ERROR, ToolError, ToolResult
from tests.tools.conftest import invocation
from tools.builtin import BUILTINS, Builtin, Replayed, ToolContext
from tools.models import RecordedRow
from tools.runner import RegistryToolRunner

pytestmark = pytest.mark.smoke

GREETER = {
    "tool_id": "greeter",
    "name": "Greeter",
    "implementation": "fake",
    "sandbox_mode": False,
    "function_schema": {
        "name": "greet",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "times": {"type": "integer", "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
}


class Fake:
    """A registry of one adapter that records how it was called."""

    def __init__(self, *, output=None, error: BaseException | None = None):
        self.calls: list[tuple[str, dict, ToolContext]] = []
        self.output = {"greeting": "hello"} if output is None else output
        self.error = error

    def adapter(self, mode: str):
        def call(arguments: dict, context: ToolContext):
            self.calls.append((mode, arguments, context))
            if self.error is not None:
                raise self.error
            return self.output

        return call

    def runner(self, **kwargs) -> RegistryToolRunner:
        builtin = Builtin("fake", GREETER, run=self.adapter("run"), sandbox=self.adapter("sandbox"))
        return RegistryToolRunner(builtins={"fake": builtin}, **kwargs)

    @property
    def modes(self) -> list[str]:
        return [mode for mode, _, _ in self.calls]


def invoke(runner: RegistryToolRunner, arguments: dict, tool=GREETER, **kwargs) -> ToolResult:
    return runner.invoke(invocation(tool, arguments, **kwargs))


def refusal(runner: RegistryToolRunner, arguments: dict, tool=GREETER, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as caught:
        invoke(runner, arguments, tool, **kwargs)
    return caught.value


# Arguments


def test_it_runs_the_adapter_with_the_arguments_and_the_calls_context():
    fake = Fake()
    result = invoke(fake.runner(), {"name": "Ada"}, key="run-3:step-1:2", workspace_id=7)

    assert result == ToolResult(output={"greeting": "hello"}, latency_ms=result.latency_ms)
    ((mode, arguments, context),) = fake.calls
    assert (mode, arguments) == ("run", {"name": "Ada"})
    assert context == ToolContext(
        tool=GREETER, idempotency_key="run-3:step-1:2", workspace_id=7, run_id="run-1"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments.name: is required"),
        ({"name": 5}, "arguments.name: must be a string, not a number"),
        ({"name": ""}, "arguments.name: must not be empty"),
        ({"name": "Ada", "times": 0}, "arguments.times: must be at least 1 (got 0)"),
        ({"name": "Ada", "tags": ["a", 2]}, "arguments.tags[1]: must be a string, not a number"),
        (
            {"name": "Ada", "nmae": "x"},
            "arguments.nmae: is not a known field; did you mean 'name'?",
        ),
    ],
    ids=["missing", "wrong-type", "empty", "below-minimum", "list-item", "unknown"],
)
def test_arguments_outside_the_schema_are_refused_naming_the_field(arguments, message):
    fake = Fake()
    error = refusal(fake.runner(), arguments)

    assert error.permanent
    assert error.code == VALIDATION_ERROR
    assert str(error) == f"tool greeter: invalid arguments: {message}"
    assert fake.calls == []


def test_it_names_every_bad_argument_at_once():
    error = refusal(Fake().runner(), {"times": "2", "tags": "x"})
    assert "arguments.name: is required" in str(error)
    assert "arguments.tags: must be a list" in str(error)
    assert "arguments.times: must be a whole number" in str(error)


def test_a_tool_without_parameters_takes_any_object():
    tool = {**GREETER, "function_schema": {"name": "greet"}}
    assert invoke(Fake().runner(), {"anything": [1, 2]}, tool).output == {"greeting": "hello"}


def test_a_broken_parameter_schema_is_a_permanent_error():
    tool = {**GREETER, "function_schema": {"parameters": {"type": "no-such-type"}}}
    error = refusal(Fake().runner(), {"name": "Ada"}, tool)
    assert error.permanent and error.code == VALIDATION_ERROR
    assert "function_schema.parameters is not a valid JSON Schema" in str(error)


def test_arguments_are_checked_before_the_implementation():
    error = refusal(Fake().runner(), {}, {**GREETER, "implementation": None})
    assert error.code == VALIDATION_ERROR


# Implementation


def test_a_tool_without_an_implementation_says_which_to_choose():
    error = refusal(RegistryToolRunner(), {"name": "Ada"}, {**GREETER, "implementation": None})
    assert error.permanent
    assert str(error) == (
        "tool greeter has no implementation; set implementation to one of: "
        "http_request, json_extract, record, simulated, template_render"
    )


def test_an_unknown_implementation_is_refused_with_the_choices():
    error = refusal(RegistryToolRunner(), {"name": "Ada"}, {**GREETER, "implementation": "shell"})
    assert error.permanent
    assert "names implementation 'shell', which is not a built-in; use one of: http_request" in str(
        error
    )


def test_the_default_registry_holds_every_built_in():
    assert (
        set(RegistryToolRunner().builtins)
        == set(BUILTINS)
        == {
            "http_request",
            "json_extract",
            "record",
            "simulated",
            "template_render",
        }
    )


# Sandbox routing


@pytest.mark.parametrize(
    ("sandbox_call", "sandbox_mode", "mode"),
    [
        (False, False, "run"),
        (True, False, "sandbox"),
        (False, True, "sandbox"),
        (True, True, "sandbox"),
    ],
)
def test_the_sandbox_runs_when_the_call_or_the_tool_asks_for_it(sandbox_call, sandbox_mode, mode):
    fake = Fake()
    tool = {**GREETER, "sandbox_mode": sandbox_mode}
    invoke(fake.runner(), {"name": "Ada"}, tool, sandbox=sandbox_call)
    assert fake.modes == [mode]


def test_a_sandboxed_record_writes_nothing(acme):
    result = RegistryToolRunner().invoke(
        invocation("record", {"table": "t", "data": {"a": 1}}, workspace_id=acme.pk, sandbox=True)
    )
    assert result.output["id"] is None
    assert not RecordedRow.objects.exists()


def test_a_record_tool_in_sandbox_mode_writes_nothing(acme):
    tool = {**BUILTINS["record"].definition, "sandbox_mode": True}
    RegistryToolRunner().invoke(
        invocation(tool, {"table": "t", "data": {"a": 1}}, workspace_id=acme.pk)
    )
    assert not RecordedRow.objects.exists()


# Errors


def test_a_tool_error_from_the_adapter_passes_through_unchanged():
    raised = ToolError("quota exceeded", permanent=True, code="LIMIT_EXCEEDED")
    error = refusal(Fake(error=raised).runner(), {"name": "Ada"})
    assert error is raised


def test_an_unexpected_exception_becomes_a_retryable_error_naming_only_its_type(caplog):
    secret = "postgres://app:s3cr3t-password@db.internal/prod"
    fake = Fake(error=ConnectionResetError(f"lost {secret}"))

    with caplog.at_level(logging.WARNING, logger="tools.runner"):
        error = refusal(fake.runner(), {"name": "Ada"})

    assert not error.permanent
    assert str(error) == (
        "tool greeter failed unexpectedly (ConnectionResetError); it may succeed if tried again"
    )
    assert error.__cause__ is None and error.__suppress_context__
    assert "s3cr3t" not in caplog.text
    assert "ConnectionResetError" in caplog.text


def test_keyboard_interrupt_is_not_swallowed():
    with pytest.raises(KeyboardInterrupt):
        invoke(Fake(error=KeyboardInterrupt()).runner(), {"name": "Ada"})


def test_an_output_that_is_not_json_is_a_permanent_error():
    error = refusal(Fake(output={"at": object()}).runner(), {"name": "Ada"})
    assert error.permanent
    assert "returned a result that is not JSON" in str(error)


def test_nan_is_not_json():
    assert refusal(Fake(output={"score": float("nan")}).runner(), {"name": "Ada"}).permanent


def test_the_output_is_returned_as_it_will_be_stored():
    result = invoke(Fake(output={"pair": (1, 2), 3: "three"}).runner(), {"name": "Ada"})
    assert result.output == {"pair": [1, 2], "3": "three"}
    json.dumps(result.output)


# Latency


def test_it_measures_the_adapters_latency():
    ticks = iter([10.0, 10.25])
    result = invoke(Fake().runner(clock=lambda: next(ticks)), {"name": "Ada"})
    assert result.latency_ms == 250


def test_real_latency_is_a_small_non_negative_number():
    result = RegistryToolRunner().invoke(
        invocation("json_extract", {"data": {"a": 1}, "expression": "a"})
    )
    assert result.output == 1
    assert 0 <= result.latency_ms < 1000


# Exactly once


def test_record_writes_once_when_a_call_is_replayed(acme):
    runner = RegistryToolRunner()
    call = invocation("record", {"table": "t", "data": {"n": 1}}, workspace_id=acme.pk)

    first = runner.invoke(call)
    again = runner.invoke(call)

    assert RecordedRow.objects.count() == 1
    assert not first.replayed
    assert again.replayed
    assert again.output == first.output


def test_a_replayed_adapter_answer_is_flagged():
    result = invoke(Fake(output=Replayed({"greeting": "hi"})).runner(), {"name": "Ada"})
    assert result.replayed and result.output == {"greeting": "hi"}


def test_the_idempotency_key_reaches_the_http_request(loopback):
    runner = RegistryToolRunner()
    runner.invoke(invocation("http_request", {"url": loopback.url("/")}, key="run-5:s:3"))
    assert loopback.requests[0].headers["idempotency-key"] == "run-5:s:3"
