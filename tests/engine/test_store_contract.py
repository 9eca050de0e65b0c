"""One suite of engine scenarios, run against both RunStores: the in-memory one
(`runs.engine.memory_store`, no database) and the ORM one (`runs.store`). Each store gets a
world with the same small API (tests/support/worlds.py); the engine, the real litellm gateway
(offline model) and the real tool runner are the same in both. Runs are driven in the test
thread: each hint the engine sends is queued and advanced here, each advance by a new worker
(a new lease owner), as `runs.engine_factory` does."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import jsonschema
import pytest
from django.db import connection

from runs.engine.core import RunStore, RunView
from runs.engine.memory_store import InMemoryRunStore
from runs.engine.ports import Committed, Finish, ModelCall, Record, Spawn, ToolCall, Transition
from runs.models import Run
from tests.factories import tool_definition
from tests.fakes.flaky_server import flaky_server as serve_flaky
from tests.support.runs import step
from tests.support.worlds import (
    MemoryWorld,
    OrmWorld,
    StoreWrapper,
    World,
    io,
    limits,
    render_tool,
)

pytestmark = pytest.mark.smoke


# -- the worlds ------------------------------------------------------------------------------


class WorkerDied(BaseException):
    """The worker process was killed: not an Exception, so the engine cannot record it."""


class _DiesInFinish(StoreWrapper):
    """The worker dies as it is about to write the run's end."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        if isinstance(transition, Finish):
            raise WorkerDied(run.id)
        return self._store.commit(run, transition)


class _CancelledAfterModelCall(StoreWrapper):
    """Someone cancels the run while its first step is in flight."""

    def record(self, run: RunView, record: Record) -> RunView:
        written = self._store.record(run, record)
        if isinstance(record, ModelCall):
            self._world.cancel(run.id)
        return written


class _CancelledAsChildrenStart(StoreWrapper):
    """Someone cancels the run after the engine's last look at the flag, before the children
    it is starting are written."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        if isinstance(transition, Spawn):
            self._world.cancel(run.id)
        return self._store.commit(run, transition)


class _OvertakenBeforeRecording(StoreWrapper):
    """The worker stalls past its lease, another worker takes the run over, then the first
    one tries to record its model call."""

    def record(self, run: RunView, record: Record) -> RunView:
        if isinstance(record, ModelCall):
            self._world.let_time_pass(self._world.lease_seconds + 1)
            other = self._world.worker_store()
            taken = other.claim(run.id)
            assert taken is not None
            self._world.overtaken = (other, taken)
        return self._store.record(run, record)


class _ParentHeldElsewhere(StoreWrapper):
    """Another worker holds the parent's lease (a sweep, a cancel) as its child ends."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        if (
            isinstance(transition, Finish)
            and run.parent_id is not None
            and self._world.overtaken is None
        ):
            other = self._world.worker_store()
            held = other.claim(run.parent_id)
            assert held is not None
            self._world.overtaken = (other, held)
        return self._store.commit(run, transition)


class _ParentCancelledWhileChildRuns(StoreWrapper):
    """Someone cancels the parent while its only child makes its model call."""

    def record(self, run: RunView, record: Record) -> RunView:
        written = self._store.record(run, record)
        if isinstance(record, ModelCall) and run.parent_id is not None:
            self._world.cancel(run.parent_id)
        return written


class _ParentFlaggedDuringToolCall(StoreWrapper):
    """A cancel of the parent lands while its first child's tool call runs, before the
    cancel's pass over the descendants reaches the child."""

    def record(self, run: RunView, record: Record) -> RunView:
        if (
            isinstance(record, ToolCall)
            and run.parent_id is not None
            and self._world.overtaken is None
        ):
            self._world.flag_only(run.parent_id)
            self._world.overtaken = (self._store, run)  # once
        return self._store.record(run, record)


class _TimeUpAsChildEnds(StoreWrapper):
    """The worker's handoff time runs out the moment a child ends."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        done = self._store.commit(run, transition)
        if isinstance(transition, Finish) and run.parent_id is not None:
            self._world.engine_in_use.handoff_s = -1.0  # `until` is already behind
            self._world.engine_in_use.clock = _Later()
        return done


class _ParentBreaksAfterItsChild(StoreWrapper):
    """The parent's next write after its child's end fails on a bug."""

    def commit(self, run: RunView, transition: Transition) -> Committed:
        if isinstance(transition, Spawn) and self._world.children(run.id):
            raise RuntimeError("a bug in the parent's turn")
        return self._store.commit(run, transition)


class _Later:
    """The engine's clock a day ahead."""

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(days=1)


@pytest.fixture(
    params=[
        "memory",
        pytest.param("orm", marks=pytest.mark.django_db),
        "memory-handoff",
        pytest.param("orm-handoff", marks=pytest.mark.django_db),
    ]
)
def world(request: pytest.FixtureRequest) -> World:
    """Each store, with the engine's handoff off (every run through the queue) and on (a
    worker goes on with the child it starts and the parent it wakes)."""
    found = _world(request)
    if request.param.endswith("handoff"):
        found.handoff_s = 3600.0
    return found


@pytest.fixture(params=["memory", pytest.param("orm", marks=pytest.mark.django_db)])
def stepwise_world(request: pytest.FixtureRequest) -> World:
    """Each store, handoff off: each advance does one run's work, so a test can look at
    the runs between advances."""
    return _world(request)


def _world(request: pytest.FixtureRequest) -> World:
    if request.param.startswith("memory"):
        return MemoryWorld()  # without the database: a query would fail the test
    return OrmWorld(request.getfixturevalue("acme"))


# -- definitions -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flaky_server() -> Iterator[str]:
    """GET /fail/N/<name> answers 503 the first N times for each name, then 200."""
    with serve_flaky() as (base, _seen):
        yield base


# -- the scenarios -----------------------------------------------------------------------------


def test_the_in_memory_store_has_every_method_of_the_protocol():
    wanted = {name for name in vars(RunStore) if not name.startswith("_")}
    assert wanted, "RunStore declares no methods?"
    assert {name for name in wanted if not callable(getattr(InMemoryRunStore, name, None))} == set()


def test_an_atomic_thought_entity_completes_with_output_valid_against_its_schema(world):
    contract = io({"text": "string"}, summary="string")
    world.add("summarise", io_contract=contract)
    run = world.run("summarise", {"text": "A long text."})

    assert world.status(run) == "COMPLETED", world.error(run)
    jsonschema.validate(world.output(run), contract["output"]["schema"])
    assert world.output(run)["summary"]
    assert world.step_statuses(run) == [("Answer", 1, "COMPLETED")]
    assert world.model_call_count(run) == 1
    assert "A long text." in world.prompts(run)[0]


class _CountingIds:
    """Run ids from a counter: the same ids on every run of a test."""

    def __init__(self) -> None:
        self.numbers = itertools.count(1)

    def new_id(self) -> str:
        return f"run-{next(self.numbers)}"


def _run_two_sequential_children(world) -> str:
    """An agent whose two children run one after the other, the first's draft feeding the
    second; run once on {"topic": "hiring"}."""
    world.add("first", io_contract=io({"topic": "string"}, draft="string"))
    world.add("second", io_contract=io({"draft": "string"}, final="string"))
    world.add(
        "parent",
        "AGENT",
        children=["first", "second"],
        io_contract=io({"topic": "string"}, final="string"),
    )
    return world.run("parent", {"topic": "hiring"})


def test_the_in_memory_store_takes_new_run_ids_from_the_ids_port():
    world = MemoryWorld()
    world.store.ids = _CountingIds()
    run = _run_two_sequential_children(world)

    assert world.status(run) == "COMPLETED", world.error(run)
    assert run == "run-1"
    assert world.children(run) == ["run-2", "run-3"]
    assert {world.trace(child) for child in world.children(run)} == {"run-1"}


def test_sequential_children_run_in_order_and_feed_each_other(world):
    run = _run_two_sequential_children(world)

    assert world.status(run) == "COMPLETED", world.error(run)
    first, second = world.children(run)
    assert [world.entity_name(first), world.entity_name(second)] == ["first", "second"]
    assert world.input(first) == {"topic": "hiring"}
    assert world.input(second) == {"draft": world.output(first)["draft"]}
    assert world.output(run) == {"final": world.output(second)["final"]}
    assert world.step_statuses(run) == [("first", 1, "COMPLETED"), ("second", 1, "COMPLETED")]


def test_parallel_children_start_together_and_are_joined_once(stepwise_world):
    world = stepwise_world
    world.add("left", io_contract=io(None, a="string"))
    world.add("right", io_contract=io(None, b="string"))
    world.add(
        "fan_out",
        "SKILL",
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
        io_contract=io(None, a="string", b="string"),
    )
    run = world.start("fan_out", {})
    world.advance(world.queue.pop(0))
    # One advance of the parent started both children, before either ran.
    children = world.children(run)
    assert [world.status(c) for c in children] == ["PENDING", "PENDING"]
    assert world.status(run) == "WAITING"
    assert world.queue == children
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert set(world.output(run)) == {"a", "b"}
    assert world.step_statuses(run) == [("left", 1, "COMPLETED"), ("right", 1, "COMPLETED")]
    finished = world.events_of(run, "step.finished")
    assert [e["step"] for e in finished] == ["left", "right"]


def test_with_handoff_one_advance_runs_a_sequential_tree_and_keeps_the_same_records(
    stepwise_world,
):
    world = stepwise_world
    world.add("first", io_contract=io(None, a="string"))
    world.add("second", io_contract=io(None, b="string"))
    world.add("pair", "SKILL", children=["first", "second"], io_contract=io(None, a="string"))
    world.add("lead", "AGENT", children=["pair"], io_contract=io(None, a="string"))
    queued = world.run("lead", {})  # every run through the queue

    world.handoff_s = 3600.0
    run = world.start("lead", {})
    world.advance(world.queue.pop(0))

    # The worker went on with each child it started and each parent it woke: no hints.
    assert world.queue == []
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == world.output(queued)
    assert world.event_types(world.trace(run)) == world.event_types(world.trace(queued))
    (pair,) = world.children(run)
    (queued_pair,) = world.children(queued)
    assert world.step_statuses(pair) == world.step_statuses(queued_pair)
    assert world.model_call_count(world.children(pair)[1]) == 1


def test_with_handoff_the_first_child_of_a_parallel_group_stays_and_the_rest_are_hinted(
    stepwise_world,
):
    world = stepwise_world
    world.add("left", io_contract=io(None, a="string"))
    world.add("right", io_contract=io(None, b="string"))
    world.add(
        "fan_out",
        "SKILL",
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
        io_contract=io(None, a="string", b="string"),
    )
    world.handoff_s = 3600.0
    run = world.start("fan_out", {})
    world.advance(world.queue.pop(0))

    left, right = world.children(run)
    assert world.status(left) == "COMPLETED"  # this worker went on with it
    assert world.queue == [right]  # any worker may take this one
    assert world.status(run) == "WAITING"
    world.advance_all()  # the last child to end wakes the parent and goes on with it
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [("left", 1, "COMPLETED"), ("right", 1, "COMPLETED")]


def test_when_the_handoff_time_is_up_the_next_run_goes_to_any_worker(stepwise_world):
    world = stepwise_world
    world.add("kid", io_contract=io(None, ok="boolean"))
    world.add("mum", "AGENT", children=["kid"])
    world.handoff_s = 1e-9  # up after the first run
    run = world.start("mum", {})
    world.advance(world.queue.pop(0))

    (kid,) = world.children(run)
    assert world.queue == [kid]
    assert world.status(kid) == "PENDING"
    # Its lease was given back: another worker takes it at once, not after the lease.
    world.handoff_s = 0.0
    world.advance(world.queue.pop(0))
    assert world.status(kid) == "COMPLETED", world.error(kid)
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


def test_with_handoff_a_parent_another_worker_holds_is_hinted_not_taken(stepwise_world):
    world = stepwise_world
    world.add("kid", io_contract=io(None, ok="boolean"))
    world.add("mum", "AGENT", children=["kid"])
    world.handoff_s = 3600.0
    run = world.start("mum", {})
    world.wrap_next = _ParentHeldElsewhere
    world.advance(world.queue.pop(0))

    (kid,) = world.children(run)
    assert world.status(kid) == "COMPLETED"
    assert world.queue == [run]  # hinted: the other worker's lease stood
    assert world.status(run) == "WAITING"
    other, held = world.overtaken
    other.release(held)
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


def test_with_handoff_a_parent_cancelled_while_its_child_ran_starts_no_new_child(
    stepwise_world,
):
    world = stepwise_world
    world.add("c1", io_contract=io(None, ok="boolean"))
    world.add("c2", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2"])
    world.handoff_s = 3600.0
    run = world.start("cp", {})
    world.wrap_next = _ParentCancelledWhileChildRuns
    world.advance(world.queue.pop(0))
    world.advance_all()

    (first,) = world.children(run)  # no second child
    assert world.status(first) == "COMPLETED"  # the step in flight finished and is kept
    assert world.step_statuses(first) == [("Answer", 1, "COMPLETED")]
    assert world.status(run) == "CANCELLED"
    # The step that waited on the child ends with the run, as when nobody went on with it.
    assert world.step_statuses(run) == [("c1", 1, "CANCELLED")]


def test_with_handoff_a_cancel_that_lands_during_a_childs_tool_call_costs_its_sibling_no_call(
    stepwise_world,
):
    world = stepwise_world
    world.add("c1", tools=[render_tool()], planning=render_plan("done"))
    world.add("c2", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2"])
    world.handoff_s = 3600.0
    run = world.start("cp", {})
    world.wrap_next = _ParentFlaggedDuringToolCall
    world.advance(world.queue.pop(0))
    world.advance_all()

    assert world.status(run) == "CANCELLED", world.error(run)
    first, *others = world.children(run)
    assert world.status(first) == "COMPLETED"  # its tool call was in flight: it finished
    # The worker went on with the parent as it left it; the next child, if it started,
    # took the flag the tool call's record read back and made no model call.
    for other in others:
        assert world.status(other) == "CANCELLED"
        assert world.model_call_count(other) == 0


@pytest.mark.django_db
def test_with_handoff_a_next_childs_cancel_check_costs_no_statement(acme, monkeypatch):
    """A child started after its sibling's recorded tool call takes the parent's cancel
    flag from that record's answer: the check before its first step reads nothing (the
    first child, after no call, reads it)."""
    from runs import sql

    reads: list[str] = []
    read = sql.cancel_flag
    monkeypatch.setattr(sql, "cancel_flag", lambda run_id: reads.append(run_id) or read(run_id))
    world = OrmWorld(acme)
    world.handoff_s = 3600.0
    world.add("c1", tools=[render_tool()], planning=render_plan("one"))
    world.add("c2", tools=[render_tool()], planning=render_plan("two"))
    world.add("c3", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2", "c3"])
    run = world.start("cp", {})
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    *_, last = world.children(run)
    assert world.model_call_count(last) == 1
    assert reads == [run]


@pytest.mark.django_db
def test_with_handoff_a_childs_row_goes_in_as_its_first_write_left_it(acme, monkeypatch):
    """A child whose start is held back goes in with its first write: its row is inserted
    running and started, and its start costs it no update of its own (an update of the
    status rewrites every index of the run table). A child whose first act is a tool call
    goes in before it, as started; its own write follows."""
    from runs import sql

    updated: list[tuple[str, dict]] = []
    update = sql.update_run
    monkeypatch.setattr(
        sql,
        "update_run",
        lambda run_id, owner, values, **claim: (
            updated.append((str(run_id), dict(values))) or update(run_id, owner, values, **claim)
        ),
    )
    world = OrmWorld(acme)
    world.handoff_s = 3600.0
    world.add("c1", tools=[render_tool()], planning=render_plan("one"))  # a tool call first
    world.add("c2", io_contract=io(None, ok="boolean"))  # a model call first
    world.add("c3", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2", "c3"])
    run = world.start("cp", {})
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    children = world.children(run)
    assert len(children) == 3
    for child in children:
        row = Run.objects.get(pk=child)
        assert row.status == "COMPLETED"
        assert row.started_at is not None
        assert row.started_at <= row.completed_at
        assert world.step_statuses(child)[-1][2] == "COMPLETED"
    for child in children[1:]:
        writes = [values for run_id, values in updated if run_id == child]
        assert [values["status"] for values in writes] == ["COMPLETED"]  # its end only
        assert "started_at" not in writes[0]


def test_with_handoff_the_end_of_a_child_is_written_when_the_time_is_up_as_it_ends(
    stepwise_world,
):
    world = stepwise_world
    world.add("c1", io_contract=io(None, ok="boolean"))
    world.add("c2", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2"])
    world.handoff_s = 3600.0
    run = world.start("cp", {})
    world.wrap_next = _TimeUpAsChildEnds
    world.advance(world.queue.pop(0))

    (first,) = world.children(run)
    assert world.status(first) == "COMPLETED"
    assert world.queue == [run]  # the parent goes to any worker, unclaimed
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert [world.status(c) for c in world.children(run)] == ["COMPLETED", "COMPLETED"]


def test_with_handoff_a_bug_in_the_parents_next_write_keeps_its_childs_end(stepwise_world):
    world = stepwise_world
    world.add("c1", io_contract=io(None, ok="boolean"))
    world.add("c2", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2"])
    world.handoff_s = 3600.0
    run = world.start("cp", {})
    world.wrap_next = _ParentBreaksAfterItsChild
    with pytest.raises(RuntimeError, match="a bug in the parent's turn"):
        world.advance(world.queue.pop(0))

    (first,) = world.children(run)
    assert world.status(first) == "COMPLETED"
    assert world.step_statuses(first) == [("Answer", 1, "COMPLETED")]
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "INTERNAL_ERROR"


def test_a_conditional_child_whose_condition_is_false_is_skipped_and_recorded(world):
    world.add("urgent", io_contract=io(None, escalated="boolean"))
    world.add("normal", io_contract=io(None, handled="boolean"))
    world.add(
        "triage",
        "SKILL",
        children=[
            {
                "child_id": "urgent",
                "relationship": "CONDITIONAL",
                "condition": {
                    "enabled": True,
                    "expression": {">=": [{"var": "input.priority"}, 8]},
                },
            },
            {"child_id": "normal"},
        ],
        io_contract={
            "input": {
                "schema": {"type": "object", "properties": {"priority": {"type": "integer"}}}
            },
            "output": {
                "schema": {"type": "object", "properties": {"handled": {"type": "boolean"}}}
            },
        },
    )
    calm = world.run("triage", {"priority": 3})

    assert world.status(calm) == "COMPLETED", world.error(calm)
    assert [world.entity_name(c) for c in world.children(calm)] == ["normal"]
    assert world.step_statuses(calm) == [("urgent", 1, "SKIPPED"), ("normal", 1, "COMPLETED")]
    assert world.events_of(calm, "step.skipped") == [
        {"step": "urgent", "reason": "condition is false"}
    ]

    urgent = world.run("triage", {"priority": 9})
    assert world.status(urgent) == "COMPLETED", world.error(urgent)
    assert [world.entity_name(c) for c in world.children(urgent)] == ["urgent", "normal"]


def test_an_exit_condition_ends_the_plan_early(world):
    world.add("one", io_contract=io(None, score="integer"))
    world.add("two", io_contract=io(None, done="boolean"))
    steps = [
        step(1, "Score", "CHILD_ENTITY_INVOCATION", entity_id="one"),
        step(2, "Finish", "CHILD_ENTITY_INVOCATION", entity_id="two"),
    ]
    steps[0]["exit_conditions"] = [{"condition": {">=": [{"var": "score"}, 0]}, "next_step": "END"}]
    world.add(
        "early",
        "SKILL",
        children=["one", "two"],
        planning={"static_plan": {"enabled": True, "steps": steps}},
        io_contract={
            "output": {"schema": {"type": "object", "properties": {"score": {"type": "integer"}}}}
        },
    )
    run = world.run("early", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    assert [world.entity_name(c) for c in world.children(run)] == ["one"]
    assert world.events_of(run, "step.exit") == [{"step": "Score", "to": "END"}]
    assert world.step_statuses(run) == [("Score", 1, "COMPLETED")]


def test_input_that_breaks_the_schema_fails_the_run_with_invalid_input(world):
    world.add("strict", io_contract=io({"email": "string"}, ok="boolean"))
    run = world.run("strict", {"email": 42})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "INVALID_INPUT" and "email" in message
    assert world.step_statuses(run) == []
    assert world.model_call_count(run) == 0
    assert world.events_of(run, "run.status")[-1]["status"] == "FAILED"


def test_an_entity_that_is_not_active_does_not_run(world):
    world.add("draft_one", metadata={"type": "ACTION", "status": "DRAFT"})
    run = world.run("draft_one", {})
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "NOT_ACTIVE"


def test_a_failing_child_fails_its_parent_with_the_childs_error(world):
    world.add("picky", io_contract=io({"must": "string"}, ok="boolean"))
    world.add("boss", "AGENT", children=["picky"])
    run = world.run("boss", {})

    (child,) = world.children(run)
    assert world.status(child) == "FAILED"
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "INVALID_INPUT"
    assert message.startswith("picky failed")
    assert world.step_statuses(run) == [("picky", 1, "FAILED")]


def test_a_retry_is_scheduled_with_a_due_time_and_not_run_before_it(
    world, flaky_server, settings, request
):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    fetch = tool_definition(
        "fetch",
        implementation="http_request",
        function_schema={
            "name": "fetch",
            "parameters": {
                "type": "object",
                "properties": {"method": {"type": "string"}, "url": {"type": "string"}},
                "required": ["method", "url"],
            },
        },
    )
    plan_step = step(1, "Fetch", "TOOL_CALL", tool_id="fetch")
    # Each world calls its own URL: the server counts failures by name.
    plan_step["input_mapping"] = {
        "method": "GET",
        "url": f"{flaky_server}/fail/1/{request.node.callspec.id}",
    }
    world.add(
        "fetcher",
        tools=[fetch],
        planning={"static_plan": {"enabled": True, "steps": [plan_step]}},
        logic_gate={
            "retry_policy": {
                "max_retries": 2,
                "backoff_strategy": "LINEAR",
                "retry_on": ["TOOL_FAILURE"],
            }
        },
    )
    run = world.run("fetcher", {})

    assert world.status(run) == "RUNNING"
    assert world.later == [(run, 1.0)]
    assert world.step_statuses(run) == [("Fetch", 1, "FAILED")]
    assert world.events_of(run, "step.retry") == [{"step": "Fetch", "attempt": 2, "delay_s": 1.0}]

    world.advance(run)  # a hint before the due time finds nothing to do
    world.let_time_pass(0.5)
    world.advance(run)
    assert world.step_statuses(run) == [("Fetch", 1, "FAILED")]
    assert world.status(run) == "RUNNING"

    world.let_time_pass(0.6)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [("Fetch", 1, "FAILED"), ("Fetch", 2, "COMPLETED")]


def test_a_cancelled_run_ends_cancelled_and_starts_no_new_child(stepwise_world):
    world = stepwise_world
    world.add("c1", io_contract=io(None, ok="boolean"))
    world.add("c2", io_contract=io(None, ok="boolean"))
    world.add("cp", "AGENT", children=["c1", "c2"])
    run = world.start("cp", {})
    world.advance(world.queue.pop(0))  # starts c1 and waits
    (first,) = world.children(run)
    world.cancel(run)
    world.queue[:] = [first, run]
    world.advance_all()

    assert world.status(first) == "CANCELLED"
    assert world.status(run) == "CANCELLED"
    assert world.error(run)[0] == "CANCELLED"
    assert world.children(run) == [first]
    assert world.model_call_count(first) == 0
    # The step that waited on the child ends with the run.
    assert world.step_statuses(run) == [("c1", 1, "CANCELLED")]


def test_a_cancel_that_lands_as_children_start_reaches_them(world):
    world.add("k1", io_contract=io(None, ok="boolean"))
    world.add("starter", "AGENT", children=["k1"])
    run = world.start("starter", {})
    world.wrap_next = _CancelledAsChildrenStart
    world.advance_all()

    assert world.status(run) == "CANCELLED"
    for child in world.children(run):
        assert world.status(child) == "CANCELLED"
        assert world.model_call_count(child) == 0


def test_a_cancel_reaches_an_escalated_child(world):
    think = step(1, "Think", "THOUGHT")
    think["exit_conditions"] = [{"condition": {"==": [1, 1]}, "next_step": "ESCALATE"}]
    world.add("escalates", planning={"static_plan": {"enabled": True, "steps": [think]}})
    world.add("manager", "AGENT", children=["escalates"])
    run = world.run("manager", {})
    (child,) = world.children(run)
    assert (world.status(run), world.status(child)) == ("WAITING", "PAUSED")

    world.cancel(run)
    world.queue[:] = [child, run]
    world.advance_all()
    assert world.status(run) == "CANCELLED"
    assert world.status(child) == "CANCELLED"


def test_a_cancel_during_a_step_lets_the_step_finish_and_starts_no_next_step(world):
    world.add(
        "two_thoughts",
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    step(1, "Draft", "THOUGHT", prompt_template="Draft an answer."),
                    step(2, "Polish", "THOUGHT", prompt_template="Polish the draft."),
                ],
            }
        },
    )
    run = world.start("two_thoughts", {})
    world.wrap_next = _CancelledAfterModelCall
    world.advance_all()

    assert world.status(run) == "CANCELLED", world.error(run)
    assert world.step_statuses(run) == [("Draft", 1, "COMPLETED")]
    assert world.model_call_count(run) == 1


def test_a_replay_after_a_crash_reuses_the_recorded_model_calls(world):
    world.add("once", io_contract=io(None, answer="string"))
    run = world.start("once", {})
    world.wrap_next = _DiesInFinish
    with pytest.raises(WorkerDied):
        world.advance_all()
    # The call was recorded at once; the end was not. The dead worker's lease is left behind.
    assert world.status(run) == "RUNNING"
    assert world.model_call_count(run) == 1

    world.advance(run)  # another worker: the lease has not expired yet
    assert world.status(run) == "RUNNING"

    world.let_time_pass(world.lease_seconds + 1)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.model_call_count(run) == 1
    assert world.event_types(world.trace(run)).count("llm.call") == 1
    assert world.step_statuses(run) == [("Answer", 1, "COMPLETED")]


def test_a_worker_that_lost_its_lease_writes_nothing_more(world):
    world.add("contested", io_contract=io(None, answer="string"))
    run = world.start("contested", {})
    world.wrap_next = _OvertakenBeforeRecording
    world.advance_all()  # the first worker stops quietly

    assert world.status(run) == "PENDING"  # its start and its call were never written
    assert world.model_call_count(run) == 0
    assert world.event_types(world.trace(run)) == ["run.created"]

    assert world.overtaken is not None
    other, taken = world.overtaken
    other.release(taken)  # the second worker lets go before doing anything
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.model_call_count(run) == 1


def test_events_are_numbered_per_trace_from_one_without_gaps(world):
    world.add("kid", io_contract=io(None, ok="boolean"))
    world.add("mum", "AGENT", children=["kid"])
    first = world.run("mum", {})
    second = world.run("mum", {})

    for run in (first, second):
        seqs = [seq for seq, *_ in world.events(world.trace(run))]
        assert seqs == list(range(1, len(seqs) + 1))
        kinds = set(world.event_types(world.trace(run)))
        assert {"run.created", "run.status", "step.started", "step.finished", "llm.call"} <= kinds
    assert world.event_types(world.trace(first))[0] == "run.created"


def test_costs_and_tokens_roll_up_to_every_ancestor(world):
    world.add("leaf", io_contract=io(None, ok="boolean"))
    world.add("mid", "SKILL", children=["leaf"])
    world.add("top", "AGENT", children=["mid"])
    run = world.run("top", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    (mid,) = world.children(run)
    (leaf,) = world.children(mid)
    [(tokens, cost)] = world.model_calls(leaf)
    assert tokens > 0 and cost > 0
    assert sorted(world.trace_runs(world.trace(run))) == sorted([run, mid, leaf])
    for each in (run, mid, leaf):
        assert world.counters(each) == (cost, tokens, 1)


def test_an_entity_with_memory_remembers_its_earlier_runs(world):
    world.add(
        "rememberer",
        io_contract=io({"question": "string"}, answer="string"),
        capabilities={"tools": [], "memory": {"enabled": True, "scope": "ENTITY"}},
    )
    first = world.run("rememberer", {"question": "What is the first colour?"})
    second = world.run("rememberer", {"question": "And the second?"})

    assert world.status(second) == "COMPLETED", world.error(second)
    assert "What is the first colour?" in world.prompts(second)[0]
    assert world.output(first)["answer"] in world.prompts(second)[0]


# -- limits and budgets (seed 000 §3.7, seed 004 Budget) ----------------------------------------


def two_thoughts() -> dict:
    return {
        "static_plan": {
            "enabled": True,
            "steps": [
                step(1, "Draft", "THOUGHT", prompt_template="Draft an answer."),
                step(2, "Polish", "THOUGHT", prompt_template="Polish the draft."),
            ],
        }
    }


def test_max_llm_calls_allows_exactly_that_many_calls(world):
    world.add("two_allowed", planning=two_thoughts(), governance=limits(max_llm_calls=2))
    world.add("one_allowed", planning=two_thoughts(), governance=limits(max_llm_calls=1))

    fits = world.run("two_allowed", {})
    assert world.status(fits) == "COMPLETED", world.error(fits)
    assert world.call_counts(fits) == (2, 0)

    capped = world.run("one_allowed", {})
    assert world.status(capped) == "FAILED"
    code, message = world.error(capped)
    assert code == "LIMIT_EXCEEDED"
    assert "one_allowed reached max_llm_calls 1" in message
    assert world.model_call_count(capped) == 1  # the second call was never made
    assert world.call_counts(capped) == (1, 0)
    assert world.step_statuses(capped) == [("Draft", 1, "COMPLETED"), ("Polish", 1, "FAILED")]


def test_max_tool_calls_allows_exactly_that_many_calls(world):
    render = render_tool()
    steps = []
    for order in (1, 2, 3):
        each = step(order, f"Render {order}", "TOOL_CALL", tool_id="render")
        each["input_mapping"] = {"template": f"part {order}", "variables": {}}
        steps.append(each)
    planning = {"static_plan": {"enabled": True, "steps": steps}}
    world.add("three_fit", tools=[render], planning=planning, governance=limits(max_tool_calls=3))
    world.add("two_fit", tools=[render], planning=planning, governance=limits(max_tool_calls=2))

    fits = world.run("three_fit", {})
    assert world.status(fits) == "COMPLETED", world.error(fits)
    assert world.call_counts(fits) == (0, 3)

    capped = world.run("two_fit", {})
    assert world.status(capped) == "FAILED"
    assert world.error(capped)[0] == "LIMIT_EXCEEDED"
    assert "max_tool_calls 2" in world.error(capped)[1]
    assert world.call_counts(capped) == (0, 2)
    assert [status for _name, _attempt, status in world.step_statuses(capped)] == [
        "COMPLETED",
        "COMPLETED",
        "FAILED",
    ]


def test_a_call_limit_counts_the_descendants_calls(world):
    world.add("caller_a", io_contract=io(None, ok="boolean"))
    world.add("caller_b", io_contract=io(None, ok="boolean"))
    world.add(
        "frugal", "AGENT", children=["caller_a", "caller_b"], governance=limits(max_llm_calls=1)
    )
    run = world.run("frugal", {})

    first, second = world.children(run)
    assert world.status(first) == "COMPLETED"
    assert world.status(second) == "FAILED"
    assert "frugal reached max_llm_calls 1" in world.error(second)[1]
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "LIMIT_EXCEEDED"
    assert world.call_counts(run) == (1, 0)
    assert world.call_counts(second) == (0, 0)  # refused above it: nothing counted for it


def test_a_budget_without_room_for_the_first_call_blocks_the_run_before_it(world):
    world.add("pricey", io_contract=io(None, answer="string"), max_cost=0.000001)
    run = world.run("pricey", {})

    assert world.status(run) == "BLOCKED"
    code, message = world.error(run)
    assert code == "BUDGET_EXHAUSTED"
    assert message.startswith("budget_exhausted: pricey has spent $0")
    assert world.model_call_count(run) == 0
    assert world.budget(run) == (Decimal("0.000001"), Decimal(0), Decimal(0))
    assert world.events_of(run, "run.status")[-1]["reason"] == "budget_exhausted"


def test_a_budget_that_says_fail_fails_the_run(world):
    world.add(
        "strict",
        io_contract=io(None, answer="string"),
        governance={
            "cost_controls": {"max_cost_usd": 0.000001, "on_budget_exhausted": "FAIL"},
            **limits(),
        },
    )
    run = world.run("strict", {})
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "LIMIT_EXCEEDED"
    assert "budget_exhausted" in world.error(run)[1]


def test_a_budget_stops_spending_before_it_is_exceeded_and_leaves_nothing_reserved(world):
    # Room for a few calls of a long plan, not all of them: it spends up to its budget, never
    # past it, and what it set aside for each call is settled.
    steps = [step(n, f"Think {n}", "THOUGHT", prompt_template=f"Thought {n}.") for n in range(1, 9)]
    world.add(
        "thinker",
        planning={"static_plan": {"enabled": True, "steps": steps}},
        logic_gate={"reasoning_config": {"max_tokens": 50}},
        max_cost=0.0004,
    )
    run = world.run("thinker", {})

    assert world.status(run) == "BLOCKED", world.error(run)
    budget, reserved, used = world.budget(run)
    assert reserved == 0
    assert 0 < used <= budget
    calls = world.model_call_count(run)
    assert 0 < calls < 8
    assert used == sum(cost for _tokens, cost in world.model_calls(run))


def test_a_childs_budget_is_set_aside_from_its_parents_and_the_rest_returned(stepwise_world):
    world = stepwise_world
    world.add("spender", io_contract=io(None, ok="boolean"), max_cost=0.01)
    world.add("holder", "AGENT", children=["spender"], max_cost=0.05)
    run = world.start("holder", {})
    world.advance(world.queue.pop(0))  # the parent starts its child: 0.01 is set aside
    (child,) = world.children(run)
    assert world.budget(run) == (Decimal("0.05"), Decimal("0.01"), Decimal(0))

    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    _budget, child_reserved, child_used = world.budget(child)
    assert child_reserved == 0 and child_used > 0
    # The child's cost is the parent's too; what it did not use came back.
    assert world.budget(run) == (Decimal("0.05"), Decimal(0), child_used)


def test_parallel_children_that_would_overspend_their_parent_do_not_start(world):
    # Designed to fit exactly ($0.015 + $0.015 of $0.03), but a first child spends from the
    # parent's budget: the pair no longer fits, and neither starts.
    world.add("opener", io_contract=io(None, ok="boolean"))
    world.add("twin_a", io_contract=io(None, ok="boolean"), max_cost=0.015)
    world.add("twin_b", io_contract=io(None, ok="boolean"), max_cost=0.015)
    world.add(
        "tight",
        "AGENT",
        children=[
            "opener",
            {"child_id": "twin_a", "relationship": "PARALLEL"},
            {"child_id": "twin_b", "relationship": "PARALLEL"},
        ],
        max_cost=0.03,
    )
    run = world.run("tight", {})

    assert world.status(run) == "BLOCKED", world.error(run)
    assert world.error(run)[0] == "BUDGET_EXHAUSTED"
    assert "ask $0.03 together" in world.error(run)[1]
    (opener,) = world.children(run)
    assert world.entity_name(opener) == "opener"
    budget, reserved, used = world.budget(run)
    assert (budget, reserved) == (Decimal("0.03"), Decimal(0))
    assert used == world.budget(opener)[2] > 0


def test_a_run_past_its_deadline_ends_timeout_and_its_children_stop(stepwise_world):
    world = stepwise_world
    world.add("slowpoke", io_contract=io(None, ok="boolean"))
    world.add("hurried", "AGENT", children=["slowpoke"], governance=limits(timeout_ms=1000))
    run = world.start("hurried", {})
    world.advance(world.queue.pop(0))  # starts the child and waits
    (child,) = world.children(run)
    world.queue.clear()

    world.let_time_pass(2)
    world.advance(run)  # the sweeper's hint: the deadline has passed
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "TIMEOUT"
    assert "timeout_ms 1000" in message
    assert world.step_statuses(run) == [("slowpoke", 1, "FAILED")]

    world.advance_all()  # the child was told to stop and ends without a call
    assert world.status(child) == "CANCELLED"
    assert world.model_call_count(child) == 0


def test_a_deadline_that_has_not_passed_changes_nothing(world):
    world.add("prompt_kid", io_contract=io(None, ok="boolean"))
    world.add("patient", "AGENT", children=["prompt_kid"], governance=limits(timeout_ms=60_000))
    run = world.run("patient", {})
    assert world.status(run) == "COMPLETED", world.error(run)


def test_a_cost_alert_is_raised_once_when_the_threshold_is_crossed(world):
    steps = [step(n, f"Think {n}", "THOUGHT", prompt_template=f"Thought {n}.") for n in (1, 2, 3)]
    world.add(
        "watched",
        planning={"static_plan": {"enabled": True, "steps": steps}},
        governance={"cost_controls": {"alert_threshold_usd": 0.000001}, **limits()},
    )
    run = world.run("watched", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.events_of(run, "cost.alert") == [{"run_id": run}]


# -- safety rails (seed 000 §3.7.4) -------------------------------------------------------------


def said(**examples: str) -> dict:
    """An output schema whose strings the offline model fills with these examples."""
    properties = {name: {"type": "string", "examples": [text]} for name, text in examples.items()}
    return {"output": {"schema": {"type": "object", "properties": properties}}}


def render_plan(template: str) -> dict:
    each = step(1, "Render", "TOOL_CALL", tool_id="render")
    each["input_mapping"] = {"template": template, "variables": {}}
    return {"static_plan": {"enabled": True, "steps": [each]}}


def rails(**safety_rails: Any) -> dict:
    return {"safety_rails": safety_rails, **limits()}


def test_a_content_filter_redacts_what_it_flags_and_marks_the_trace(world):
    world.add(
        "leaky",
        io_contract=said(note="Write to jane.doe@example.com before Friday."),
        governance=rails(content_filters=["PII"]),
    )
    run = world.run("leaky", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"note": "Write to [REDACTED:EMAIL] before Friday."}
    [flagged] = world.events_of(run, "safety.flagged")
    assert flagged == {"step": "Answer", "kinds": ["PII:EMAIL"], "action": "REDACT"}


def test_a_content_filter_set_to_fail_fails_the_step(world):
    world.add(
        "strict_leaky",
        io_contract=said(note="Write to jane.doe@example.com before Friday."),
        governance=rails(content_filters=["PII", "PROFANITY"], on_flagged_output="FAIL"),
    )
    run = world.run("strict_leaky", {})
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert "content filters flagged the model's output: PII:EMAIL" in message
    assert "jane.doe" not in message


def test_clean_output_passes_the_filters_untouched(world):
    world.add(
        "clean",
        io_contract=said(note="The quarterly report is ready for review."),
        governance=rails(content_filters=["PII", "PROFANITY", "TOXICITY", "BIAS"]),
    )
    run = world.run("clean", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"note": "The quarterly report is ready for review."}
    assert world.events_of(run, "safety.flagged") == []
    assert world.model_call_count(run) == 2  # the answer and the bias judge's verdict


def test_the_bias_filter_asks_a_judge_through_the_gateway_and_redacts(world):
    world.add(
        "biased",
        io_contract=said(note="Women are not good at engineering, so hire men."),
        governance=rails(content_filters=["BIAS"]),
    )
    run = world.run("biased", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"note": "[REDACTED:BIAS]"}
    assert world.events_of(run, "safety.flagged")[0]["kinds"] == ["BIAS:BIAS"]
    assert world.model_call_count(run) == 2


def test_an_action_restriction_blocks_the_tool_before_it_is_called(world):
    world.add(
        "blocked",
        tools=[render_tool()],
        planning=render_plan("hello"),
        governance=rails(
            action_restrictions=[{"restricted_action": "render", "blocked_entirely": True}]
        ),
    )
    world.add(
        "needs_ok",
        tools=[render_tool()],
        planning=render_plan("hello"),
        governance=rails(action_restrictions=[{"restricted_action": "render"}]),
    )
    blocked = world.run("blocked", {})
    assert world.status(blocked) == "FAILED"
    assert world.error(blocked) == (
        "PERMISSION_DENIED",
        "step 'Render': blocked may not call the tool render: action_restrictions block it",
    )
    assert world.call_counts(blocked) == (0, 0)

    pending = world.run("needs_ok", {})
    assert world.status(pending) == "PAUSED"
    (asked,) = world.approvals(pending)
    assert (asked["trigger"], asked["status"], asked["subject"]) == (
        "ACTION_RESTRICTION",
        "PENDING",
        "tool_arguments",
    )
    assert world.call_counts(pending) == (0, 0)
    world.decide(pending, "approve")
    world.advance_all()
    assert world.status(pending) == "COMPLETED", world.error(pending)
    assert world.call_counts(pending) == (0, 1)


def test_a_behavioral_constraint_rule_is_checked_before_each_tool_call(world):
    rule = {"!=": [{"var": "tool.arguments.template"}, "forbidden"]}
    persona = {
        "system_prompt": "You render.",
        "behavioral_constraints": [
            "Be brief.",
            {"constraint": "Never render the forbidden template", "rule": rule},
        ],
    }
    for name, template in (("allowed", "fine"), ("refused", "forbidden")):
        world.add(
            name,
            tools=[render_tool()],
            planning=render_plan(template),
            identity={"name": name, "description": "renders", "persona": persona},
        )
    ok = world.run("allowed", {})
    assert world.status(ok) == "COMPLETED", world.error(ok)

    refused = world.run("refused", {})
    assert world.status(refused) == "FAILED"
    code, message = world.error(refused)
    assert code == "VALIDATION_ERROR"
    assert "'Never render the forbidden template' forbids calling render" in message
    assert world.call_counts(refused) == (0, 0)


def test_personal_data_is_redacted_in_the_model_call_log_by_default(world):
    world.add("echo", io_contract=io({"who": "string"}, answer="string"))
    world.add(
        "open_book",
        io_contract=io({"who": "string"}, answer="string"),
        governance={"human_oversight": {"pii_handling": "ALLOW"}, **limits()},
    )
    run = world.run("echo", {"who": "call +44 20 7946 0958 or mail ann@example.org"})
    assert world.status(run) == "COMPLETED", world.error(run)
    [prompt] = world.prompts(run)
    assert "ann@example.org" not in prompt and "7946 0958" not in prompt
    assert "[REDACTED:EMAIL]" in prompt and "[REDACTED:PHONE]" in prompt

    kept = world.run("open_book", {"who": "mail ann@example.org"})
    assert "ann@example.org" in world.prompts(kept)[0]


def test_an_entity_that_does_not_log_thoughts_keeps_no_prompt(world):
    world.add(
        "quiet",
        io_contract=io(None, answer="string"),
        observability={"logging": {"log_thoughts": False}},
    )
    run = world.run("quiet", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    [prompt] = world.prompts(run)
    assert "You are quiet." not in prompt
    assert "not logged" in prompt


class _RateLimitedOnce:
    """A tool runner whose first call meets a full rate limit (as tools/ratelimit.py answers)."""

    def __init__(self, runner: Any):
        self.runner, self.refused = runner, 0

    def invoke(self, invocation: Any) -> Any:
        from runs.engine.ports import RATE_LIMITED, ToolError

        if not self.refused:
            self.refused += 1
            raise ToolError(
                "tool render: calls_per_minute 1 reached; next call in 2.5 s",
                code=RATE_LIMITED,
                retry_after_s=2.5,
            )
        return self.runner.invoke(invocation)


def test_a_rate_limited_step_waits_its_turn_without_spending_a_retry(world):
    world.tools = _RateLimitedOnce(world.tools)
    world.add("queued", tools=[render_tool()], planning=render_plan("hi"))
    run = world.run("queued", {})

    assert world.status(run) == "RUNNING"
    assert world.later == [(run, 2.5)]
    assert world.step_statuses(run) == [("Render", 1, "WAITING")]
    assert world.events_of(run, "step.rate_limited") == [{"step": "Render", "delay_s": 2.5}]

    world.let_time_pass(3)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [("Render", 1, "COMPLETED")]  # the same attempt


def test_a_lifetime_budget_gives_each_child_run_what_is_left_and_then_refuses(world):
    world.add(
        "metered",
        io_contract=io(None, ok="boolean"),
        governance={"cost_controls": {"cumulative_cost_usd": 0.02}, **limits()},
    )
    world.add(
        "loop_of_three",
        "AGENT",
        children=["metered", "metered", "metered"],
    )
    run = world.run("loop_of_three", {})
    first, *rest = world.children(run)
    # The first run of `metered` may use the whole lifetime budget: its budget is what is
    # left of it ($0.02), and what it did not use is left for the next.
    budget, _reserved, used = world.budget(first)
    assert budget == Decimal("0.02") and used > 0
    assert world.status(first) == "COMPLETED"
    assert world.budget(rest[0])[0] == Decimal("0.02") - used

    total = sum(world.budget(child)[2] for child in world.children(run))
    assert total <= Decimal("0.02")


def test_a_lifetime_budget_that_is_used_up_refuses_the_next_run(world):
    world.add(
        "once_only",
        io_contract=io(None, ok="boolean"),
        governance={"cost_controls": {"cumulative_cost_usd": 0.000001}, **limits()},
    )
    world.add("caller", "AGENT", children=["once_only"])
    first = world.run("caller", {})
    (child,) = world.children(first)
    assert world.status(child) == "BLOCKED"  # $0.000001 has no room for a call

    second = world.run("caller", {})
    assert world.status(second) == "FAILED"
    code, message = world.error(second)
    assert code == "LIMIT_EXCEEDED"
    assert "once_only has used its cumulative_cost_usd of $0.000001" in message


def test_comprehensive_auditing_logs_state_changes_unless_they_are_turned_off(world):
    for name, logging in (("audited", {}), ("audited_quietly", {"log_state_changes": False})):
        world.add(
            name,
            io_contract=io(None, answer="string"),
            governance={"human_oversight": {"audit_level": "COMPREHENSIVE"}, **limits()},
            observability={"logging": logging},
        )
    world.add("standard", io_contract=io(None, answer="string"))

    audited = world.run("audited", {})
    assert world.events_of(audited, "state.changed") == [
        {"step": "Answer", "keys": ["Answer", "answer"]}
    ]
    assert world.events_of(world.run("audited_quietly", {}), "state.changed") == []
    assert world.events_of(world.run("standard", {}), "state.changed") == []


class _EstimatesSeen:
    """The real gateway, noting what each call was estimated to cost at most."""

    def __init__(self, model: Any):
        self.model, self.estimates = model, []

    def complete(self, request: Any) -> Any:
        return self.model.complete(request)

    def count_tokens(self, model: str, text: str) -> int:
        return self.model.count_tokens(model, text)

    def estimate_cost(self, request: Any) -> Decimal:
        self.estimates.append(self.model.estimate_cost(request))
        return self.estimates[-1]


def test_a_budget_of_exactly_the_calls_estimate_lets_it_run_and_a_micro_less_does_not(world):
    world.model = _EstimatesSeen(world.model)
    persona = {"system_prompt": "You answer."}

    def add(name: str, budget: float) -> str:
        identity = {"name": name, "description": "answers", "persona": persona}
        return world.add(
            name, io_contract=io(None, answer="string"), identity=identity, max_cost=budget
        )

    probe = world.run(add("probe", 1.0), {})
    assert world.status(probe) == "COMPLETED", world.error(probe)
    [estimate] = world.model.estimates
    exact = world.run(add("exact", float(estimate)), {})
    short = world.run(add("short", float(estimate - Decimal("0.000001"))), {})

    assert world.model.estimates[1:] == [estimate, estimate]  # the same call each time
    assert world.status(exact) == "COMPLETED", world.error(exact)
    assert world.budget(exact)[2] <= estimate
    assert world.status(short) == "BLOCKED"
    assert world.model_call_count(short) == 0


@pytest.mark.django_db
def test_the_orm_store_works_with_prepared_statements_turned_off(acme):
    """What HIERARCH_PREPARE_STATEMENTS=0 leaves: psycopg's prepare_threshold None (SQLite
    prepares nothing either way)."""
    connection.ensure_connection()
    raw = connection.connection
    threshold = getattr(raw, "prepare_threshold", None)
    if connection.vendor == "postgresql":
        raw.prepare_threshold = None
    try:
        plain_run(acme)
    finally:
        if connection.vendor == "postgresql" and connection.connection is raw:
            raw.prepare_threshold = threshold


def plain_run(acme) -> None:  # noqa: ANN001
    world = OrmWorld(acme)
    world.add("plain_kid", io_contract=io(None, ok="boolean"))
    world.add("plain_mum", "AGENT", children=["plain_kid"], max_cost=1.0)
    run = world.run("plain_mum", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.budget(run)[1] == 0
