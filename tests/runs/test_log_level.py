"""`observability.logging.log_level` on both stores (the in-memory one and the ORM's): the events
below the entity's level are not written, except the product's own record (a run's creation
and statuses, requests to people and their decisions, a person's edits) and failures, which
every level keeps; the default level writes what it always wrote, but for the DEBUG kinds."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from runs.engine.observability import ALWAYS, DEBUG, ERROR, EVENT_LEVELS, INFO, WARN, event_level
from runs.engine.state import EVENT_KINDS
from tests.factories import tool_definition
from tests.support.runs import step
from tests.support.worlds import MemoryWorld, OrmWorld, World, io, limits, render_tool

pytestmark = pytest.mark.smoke


@pytest.fixture(params=["memory", pytest.param("orm", marks=pytest.mark.django_db)])
def world(request: pytest.FixtureRequest) -> World:
    if request.param == "memory":
        return MemoryWorld()
    return OrmWorld(request.getfixturevalue("acme"))


def logging(level: str | None) -> dict:
    return {"logging": {} if level is None else {"log_level": level}}


def kinds(world: World, run: str) -> list[str]:
    return world.event_types(world.trace(run))


def boss_and_worker(world: World, suffix: str, level: str | None) -> str:
    """An AGENT whose one child answers with a model call; both at `level`."""
    answers = io(None, answer="string")
    world.add(f"worker{suffix}", io_contract=answers, observability=logging(level))
    return world.add(
        f"boss{suffix}", "AGENT", children=[f"worker{suffix}"], observability=logging(level)
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def failing_fetcher(world: World, name: str, level: str, settings: Any) -> str:
    """A tool step whose call fails in a way worth retrying (nothing listens on its port,
    on loopback), with one retry."""
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    fetch = tool_definition(
        "fetch",
        implementation="http_request",
        function_schema={
            "name": "fetch",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        },
    )
    each = step(1, "Fetch", "TOOL_CALL", tool_id="fetch")
    each["input_mapping"] = {"url": f"http://127.0.0.1:{closed_port()}/nothing"}
    return world.add(
        name,
        tools=[fetch],
        planning={"static_plan": {"enabled": True, "steps": [each]}},
        logic_gate={
            "retry_policy": {
                "max_retries": 1,
                "backoff_strategy": "LINEAR",
                "retry_on": ["TOOL_FAILURE"],
            }
        },
        observability=logging(level),
    )


# -- the table ---------------------------------------------------------------------------------


def test_every_kind_of_event_has_one_level():
    assert set(EVENT_LEVELS) == EVENT_KINDS
    assert set(EVENT_LEVELS.values()) <= {DEBUG, INFO, WARN, ERROR, ALWAYS}


def test_failures_and_a_persons_acts_are_kept_whatever_their_kind():
    assert event_level("step.finished", {"step": "A", "status": "COMPLETED"}) == INFO
    assert event_level("step.finished", {"step": "A", "status": "FAILED"}) == ERROR
    assert event_level("tool.call", {"step": "A", "success": True}) == INFO
    assert event_level("tool.call", {"step": "A", "success": False}) == ERROR
    assert event_level("step.retry", {"step": "A", "attempt": 2}) == WARN
    assert event_level("step.retry", {"step": "A", "attempt": 2, "by": "person"}) == ALWAYS
    assert event_level("review.passed", {"by": "olive"}) == ALWAYS


# -- the default -------------------------------------------------------------------------------


def test_the_default_level_writes_what_debug_writes_in_a_run_with_no_debug_event(world):
    default = world.run(boss_and_worker(world, "_default", None), {})
    debug = world.run(boss_and_worker(world, "_debug", "DEBUG"), {})
    info = world.run(boss_and_worker(world, "_info", "INFO"), {})

    assert world.status(default) == "COMPLETED", world.error(default)
    written = kinds(world, default)
    assert written == kinds(world, debug) == kinds(world, info)
    # What the live trace page and the trace's readers have always had at the default level.
    assert {"run.created", "run.status", "plan.ready", "step.started", "step.finished"} <= set(
        written
    )
    assert "llm.call" in written


def test_a_trimmed_context_is_a_debug_event_and_the_call_log_still_shows_the_trim(world):
    def squeezed(name: str, level: str | None) -> str:
        return world.add(
            name,
            io_contract=io({"topic": "string"}, note="string"),
            capabilities={
                "context_engineering": {
                    "max_context_tokens": 300,
                    "context_priority": ["SYSTEM_PROMPT", "USER_INPUT"],
                    "artifact_handling": {"artifact_reference_mode": "INLINE"},
                }
            },
            observability=logging(level),
        )

    topic = {"topic": "word " * 2000}
    at_info = world.run(squeezed("squeezed", None), topic)
    at_debug = world.run(squeezed("squeezed_debug", "DEBUG"), topic)

    assert world.status(at_info) == world.status(at_debug) == "COMPLETED"
    assert "context.trimmed" not in kinds(world, at_info)
    (trimmed,) = world.events_of(at_debug, "context.trimmed")
    assert trimmed["dropped"]
    assert "truncated to fit the context" in world.prompts(at_info)[0]
    assert [k for k in kinds(world, at_debug) if k != "context.trimmed"] == kinds(world, at_info)


# -- WARN and ERROR ----------------------------------------------------------------------------


def test_warn_keeps_issues_and_failures_and_drops_the_key_events(world, settings):
    run = world.run(failing_fetcher(world, "fetcher", "WARN", settings), {})

    assert world.status(run) == "RUNNING"  # its retry waits for its time
    assert kinds(world, run) == [
        "run.created",
        "run.status",  # RUNNING
        "tool.call",  # failed: ERROR
        "step.finished",  # FAILED: ERROR
        "step.retry",
    ]
    assert world.events_of(run, "tool.call")[0]["success"] is False
    assert world.events_of(run, "step.finished")[0]["status"] == "FAILED"


def test_error_keeps_the_failures_and_the_runs_own_record(world, settings):
    at_error = world.run(failing_fetcher(world, "fetcher", "ERROR", settings), {})
    at_info = world.run(failing_fetcher(world, "fetcher_info", "INFO", settings), {})

    assert kinds(world, at_error) == ["run.created", "run.status", "tool.call", "step.finished"]
    assert {"plan.ready", "step.started", "step.retry"} <= set(kinds(world, at_info))
    # What is not written as an event is still recorded: the step and the call.
    assert world.step_statuses(at_error) == world.step_statuses(at_info)
    assert world.call_counts(at_error) == world.call_counts(at_info) == (0, 1)


def careful(world: World, name: str, level: str) -> str:
    """A tool step a person is asked about before the call."""
    each = step(1, "Render", "TOOL_CALL", tool_id="render")
    each["input_mapping"] = {"template": "hello", "variables": {}}
    return world.add(
        name,
        tools=[render_tool()],
        planning={"static_plan": {"enabled": True, "steps": [each]}},
        io_contract=io(None, text="string"),
        governance={
            "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_TOOL_CALL"}]},
            **limits(),
        },
        observability=logging(level),
    )


def edited_run(world: World, name: str) -> str:
    run = world.run(name, {})
    assert world.status(run) == "PAUSED"
    world.decide(run, "edit", payload={"template": "edited by a person", "variables": {}})
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "edited by a person"}
    return run


def test_error_keeps_a_run_to_its_end_requests_to_people_and_their_edits(world):
    at_error = edited_run(world, careful(world, "careful", "ERROR"))
    at_debug = edited_run(world, careful(world, "careful_debug", "DEBUG"))

    written = kinds(world, at_error)
    assert written == [k for k in kinds(world, at_debug) if EVENT_LEVELS[k] == ALWAYS]
    assert {"run.created", "approval.requested", "tool.arguments_edited"} <= set(written)
    assert [e["status"] for e in world.events_of(at_error, "run.status")] == [
        "RUNNING",
        "COMPLETED",
    ]
    assert {"plan.ready", "step.started", "step.finished", "tool.call"} <= set(
        kinds(world, at_debug)
    ) - set(written)


def test_a_cost_alert_is_a_warning_error_leaves_out_and_so_does_its_log_line(world, caplog):
    def watched(name: str, level: str) -> str:
        return world.add(
            name,
            io_contract=io(None, answer="string"),
            governance={"cost_controls": {"alert_threshold_usd": 0.000001}, **limits()},
            observability=logging(level),
        )

    with caplog.at_level("WARNING", logger="runs.store"):
        at_warn = world.run(watched("watched", "WARN"), {})
        at_error = world.run(watched("watched_quietly", "ERROR"), {})

    assert world.status(at_warn) == world.status(at_error) == "COMPLETED"
    assert world.events_of(at_warn, "cost.alert") == [{"run_id": at_warn}]
    assert world.events_of(at_error, "cost.alert") == []
    logged = " ".join(r.getMessage() for r in caplog.records if "cost alert" in r.getMessage())
    assert at_error not in logged
    if isinstance(world, OrmWorld):  # the ORM store logs the alert too
        assert at_warn in logged


def test_a_childs_level_is_its_own(world):
    world.add("quiet_worker", io_contract=io(None, answer="string"), observability=logging("ERROR"))
    world.add("chatty_boss", "AGENT", children=["quiet_worker"], observability=logging("DEBUG"))
    run = world.run("chatty_boss", {})
    (child,) = world.children(run)

    assert world.status(run) == "COMPLETED", world.error(run)
    by_run: dict[str, list[str]] = {}
    for _seq, run_id, kind, _payload in world.events(world.trace(run)):
        by_run.setdefault(run_id, []).append(kind)
    assert {"step.started", "step.finished", "plan.ready"} <= set(by_run[run])
    assert set(by_run[child]) == {"run.status"}  # its run.created is its parent's event
