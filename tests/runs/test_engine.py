"""The engine on the ORM store, the real gateway (offline model through litellm) and the real
tool runner. Runs are driven synchronously in the test thread: each hint the engine sends is
queued and advanced here, so every step is deterministic and inside the test transaction."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from entities.models import Entity
from runs.models import LLMCall, Run, RunEvent, StepRun, ToolCall
from runs.selectors import run_document, trace_tree
from runs.services import run_start
from tests.factories import EntityFactory, tool_definition
from tests.support.queued_runs import Driver
from tests.support.runs import io, static_plan, step
from tests.support.runs_api import pick_tool
from tools.models import RecordedRow

pytestmark = pytest.mark.smoke

JOB = (
    "We are seeking a Senior Software Engineer to design and build distributed systems, "
    "mentor engineers and own critical services end to end across our platform."
)


@pytest.fixture
def driver(db):
    return Driver()


# The demo, end to end


def test_the_demo_process_runs_to_completion_with_a_four_level_trace(driver):
    call_command("setup_demo", stdout=None)
    process = Entity.objects.get(workspace__slug="demo", name="video_ad_creation_process")
    run = driver.run(process, {"job_description": JOB, "company_name": "TechCorp"})

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert set(run.output_data) >= {"video_url", "duration_seconds", "script"}
    tree = trace_tree(run)["trace_tree"]
    depth = 0
    node = tree
    while node["children"]:
        depth += 1
        node = node["children"][0]
    assert depth == 3
    assert [c["node"]["entity_name"] for c in tree["children"]] == [
        "content_analyst_agent",
        "creative_director_agent",
        "video_production_agent",
    ]
    assert node["node"]["type"] == "ACTION"
    assert node["node"]["tool_calls"] and node["node"]["llm_calls"]

    document = run_document(run)
    descendants = Run.objects.filter(trace_id=run.trace_id).exclude(pk=run.pk)
    assert (
        document["metrics"]["llm_calls"]
        == LLMCall.objects.filter(run__trace_id=run.trace_id).count()
    )
    assert (
        document["metrics"]["tool_calls"]
        == ToolCall.objects.filter(run__trace_id=run.trace_id).count()
    )
    assert Decimal(str(document["metrics"]["total_cost_usd"])) > 0
    assert all(r.status == "COMPLETED" for r in descendants)


# Plan semantics


def test_an_atomic_entity_answers_with_its_output_schema(driver, acme):
    action = EntityFactory(
        workspace=acme, name="summarise", io_contract=io({"text": "string"}, summary="string")
    )
    run = driver.run(action, {"text": "A long text."})
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert isinstance(run.output_data["summary"], str) and run.output_data["summary"]
    call = LLMCall.objects.get(run=run)
    assert "A long text." in call.input_prompt
    assert call.prompt_tokens > 0 and call.cost_usd > 0


def test_sequential_children_run_in_order_and_feed_each_other(driver, acme):
    first = EntityFactory(
        workspace=acme, name="first", io_contract=io({"topic": "string"}, draft="string")
    )
    second = EntityFactory(
        workspace=acme, name="second", io_contract=io({"draft": "string"}, final="string")
    )
    parent = EntityFactory(
        workspace=acme,
        name="parent",
        type="AGENT",
        children=[first, second],
        io_contract=io({"topic": "string"}, final="string"),
    )
    run = driver.run(parent, {"topic": "hiring"})

    assert run.status == "COMPLETED"
    children = list(Run.objects.filter(parent=run).order_by("created_at"))
    assert [c.entity.name for c in children] == ["first", "second"]
    assert children[0].input_data == {"topic": "hiring"}
    assert children[1].input_data == {"draft": children[0].output_data["draft"]}
    assert run.output_data == {"final": children[1].output_data["final"]}


def test_parallel_children_start_together_and_are_joined_once(driver, acme):
    EntityFactory(workspace=acme, name="left", io_contract=io(None, a="string"))
    EntityFactory(workspace=acme, name="right", io_contract=io(None, b="string"))
    parent = EntityFactory(
        workspace=acme,
        name="fan_out",
        type="SKILL",
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
        io_contract=io(None, a="string", b="string"),
    )
    run = run_start(entity=parent, input_data={})
    driver.engine.advance(str(run.pk))
    # One advance of the parent started both children at once, before either ran.
    spawned = Run.objects.filter(parent=run)
    assert spawned.count() == 2
    assert set(spawned.values_list("status", flat=True)) == {"PENDING"}
    assert Run.objects.get(pk=run.pk).status == "WAITING"
    driver.drain()

    run.refresh_from_db()
    assert run.status == "COMPLETED"
    assert set(run.output_data) == {"a", "b"}
    join = StepRun.objects.filter(run=run, status="COMPLETED")
    assert join.count() == 2


def test_a_conditional_child_whose_condition_is_false_is_skipped_and_recorded(driver, acme):
    EntityFactory(workspace=acme, name="urgent", io_contract=io(None, escalated="boolean"))
    EntityFactory(workspace=acme, name="normal", io_contract=io(None, handled="boolean"))
    parent = EntityFactory(
        workspace=acme,
        name="triage",
        type="SKILL",
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
    run = driver.run(parent, {"priority": 3})

    assert run.status == "COMPLETED"
    assert [c.entity.name for c in Run.objects.filter(parent=run)] == ["normal"]
    skipped = StepRun.objects.get(run=run, status="SKIPPED")
    assert skipped.name == "urgent"
    assert RunEvent.objects.filter(run=run, type="step.skipped").exists()

    urgent_run = driver.run(parent, {"priority": 9})
    assert {c.entity.name for c in Run.objects.filter(parent=urgent_run)} == {"urgent", "normal"}


def test_an_exit_condition_ends_the_plan_early(driver, acme):
    one = EntityFactory(workspace=acme, name="one", io_contract=io(None, score="integer"))
    two = EntityFactory(workspace=acme, name="two", io_contract=io(None, done="boolean"))
    plan_steps = [
        step(1, "Score", "CHILD_ENTITY_INVOCATION", entity_id="one"),
        step(2, "Finish", "CHILD_ENTITY_INVOCATION", entity_id="two"),
    ]
    plan_steps[0]["exit_conditions"] = [
        {"condition": {">=": [{"var": "score"}, 0]}, "next_step": "END"}
    ]
    parent = EntityFactory(
        workspace=acme,
        name="early",
        type="SKILL",
        children=[one, two],
        planning=static_plan(*plan_steps),
        io_contract={
            "output": {"schema": {"type": "object", "properties": {"score": {"type": "integer"}}}}
        },
    )
    run = driver.run(parent, {})

    assert run.status == "COMPLETED"
    assert [c.entity.name for c in Run.objects.filter(parent=run)] == ["one"]
    assert RunEvent.objects.filter(run=run, type="step.exit", payload__to="END").exists()


def test_an_input_mapping_shapes_a_childs_input(driver, acme):
    EntityFactory(
        workspace=acme, name="greeter", io_contract=io({"who": "string"}, greeting="string")
    )
    parent = EntityFactory(
        workspace=acme,
        name="host",
        type="AGENT",
        children=[
            {
                "child_id": "greeter",
                "input_mapping": {"who": {"cat": ["Dr. ", {"var": "input.name"}]}},
            }
        ],
        io_contract=io({"name": "string"}, greeting="string"),
    )
    run = driver.run(parent, {"name": "Ada"})
    assert run.status == "COMPLETED"
    assert Run.objects.get(parent=run).input_data == {"who": "Dr. Ada"}


# Tool calls


def test_a_tool_step_with_a_parameter_mapping_calls_the_tool_once(driver, acme):
    record = tool_definition(
        "save_row",
        implementation="record",
        permissions="WRITE",
        function_schema={
            "name": "save_row",
            "parameters": {
                "type": "object",
                "properties": {"table": {"type": "string"}, "data": {"type": "object"}},
                "required": ["table", "data"],
            },
        },
    )
    plan_step = step(1, "Save", "TOOL_CALL", tool_id="save_row")
    plan_step["input_mapping"] = {"table": "leads", "data": {"var": "input"}}
    action = EntityFactory(
        workspace=acme,
        name="saver",
        tools=[record],
        planning=static_plan(plan_step),
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"email": {"type": "string"}}}},
            "output": {
                "schema": {"type": "object", "properties": {"id": {"type": ["integer", "null"]}}}
            },
        },
    )
    run = driver.run(action, {"email": "ada@example.com"})

    assert run.status == "COMPLETED", run.error_message
    row = RecordedRow.objects.get()
    assert row.data == {"email": "ada@example.com"} and row.table == "leads"
    call = ToolCall.objects.get(run=run)
    assert call.success and call.idempotency_key.startswith(str(run.pk))
    assert run.output_data == {"id": row.pk}


def test_a_tool_step_without_a_mapping_gets_its_arguments_from_the_model(driver, acme):
    action = EntityFactory(
        workspace=acme,
        name="picker",
        tools=[pick_tool()],
        planning=static_plan(step(1, "Pick", "TOOL_CALL", tool_id="pick")),
    )
    run = driver.run(action, {})
    assert run.status == "COMPLETED", run.error_message
    purposes = list(LLMCall.objects.filter(run=run).values_list("purpose", flat=True))
    assert purposes == ["TOOL_ARGUMENTS"]
    assert ToolCall.objects.get(run=run).input_parameters["expression"] == "a"


def test_a_replayed_step_reuses_the_recorded_calls(driver, acme):
    action = EntityFactory(workspace=acme, name="once", io_contract=io(None, answer="string"))
    run = driver.run(action, {})
    assert LLMCall.objects.filter(run=run).count() == 1
    # A worker died after the call was recorded but before the step was: its lease is left
    # behind, expired, and the run is replayed from the step.
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING",
        cursor=0,
        output_data=None,
        completed_at=None,
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED"
    assert LLMCall.objects.filter(run=run).count() == 1


# Bad input and failures


def test_input_that_breaks_the_schema_fails_the_run_with_invalid_input(driver, acme):
    action = EntityFactory(
        workspace=acme, name="strict", io_contract=io({"email": "string"}, ok="boolean")
    )
    run = driver.run(action, {"email": 42})
    assert run.status == "FAILED"
    assert run.error_code == "INVALID_INPUT"
    assert "email" in run.error_message
    assert RunEvent.objects.filter(run=run, type="run.status", payload__status="FAILED").exists()


def test_a_named_validation_rule_is_checked(driver, acme):
    contract = io({"job_description": "string"}, ok="boolean")
    contract["input"]["validation_rules"] = [
        {"rule": "job_description must be at least 100 characters", "validator": "length_validator"}
    ]
    action = EntityFactory(workspace=acme, name="ruled", io_contract=contract)
    run = driver.run(action, {"job_description": "too short"})
    assert run.error_code == "INVALID_INPUT"
    assert "at least 100 characters (it has 9)" in run.error_message


def test_an_entity_that_is_not_active_does_not_run(driver, acme):
    action = EntityFactory(
        workspace=acme, name="draft_one", metadata={"type": "ACTION", "status": "DRAFT"}
    )
    run = driver.run(action, {})
    assert run.status == "FAILED" and run.error_code == "NOT_ACTIVE"


def test_a_failing_child_fails_its_parent_with_the_childs_error(driver, acme):
    child = EntityFactory(
        workspace=acme, name="picky", io_contract=io({"must": "string"}, ok="boolean")
    )
    parent = EntityFactory(workspace=acme, name="boss", type="AGENT", children=[child])
    run = driver.run(parent, {})
    assert run.status == "FAILED"
    assert run.error_code == "INVALID_INPUT"
    assert run.error_message.startswith("picky failed")


def test_recursion_past_the_roots_limit_is_stopped(driver, acme):
    leaf = EntityFactory(workspace=acme, name="leaf", io_contract=io(None, ok="boolean"))
    mid = EntityFactory(workspace=acme, name="mid", type="SKILL", children=[leaf])
    top = EntityFactory(workspace=acme, name="top", type="AGENT", children=[mid])
    assert driver.run(top, {}).status == "COMPLETED"

    # The root's limit travels down the trace: with 1, the skill may not start its action.
    run = run_start(entity=top, input_data={})
    Run.objects.filter(pk=run.pk).update(depth_limit=1)
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "FAILED"
    assert run.error_code == "LIMIT_EXCEEDED"
    mid_run = Run.objects.get(parent=run)
    assert "would nest 2 levels deep" in mid_run.error_message
    assert not Run.objects.filter(parent=mid_run).exists()


def test_events_are_numbered_per_trace_without_gaps(driver, acme):
    child = EntityFactory(workspace=acme, name="kid", io_contract=io(None, ok="boolean"))
    parent = EntityFactory(workspace=acme, name="mum", type="AGENT", children=[child])
    run = driver.run(parent, {})
    seqs = list(RunEvent.objects.filter(trace_id=run.trace_id).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    kinds = set(RunEvent.objects.filter(trace_id=run.trace_id).values_list("type", flat=True))
    assert {"run.created", "run.status", "step.started", "step.finished", "llm.call"} <= kinds


def test_costs_and_tokens_roll_up_to_every_ancestor(driver, acme):
    leaf = EntityFactory(workspace=acme, name="leaf2", io_contract=io(None, ok="boolean"))
    mid = EntityFactory(workspace=acme, name="mid2", type="SKILL", children=[leaf])
    top = EntityFactory(workspace=acme, name="top2", type="AGENT", children=[mid])
    run = driver.run(top, {})
    leaf_run = Run.objects.get(trace_id=run.trace_id, entity=leaf)
    call = LLMCall.objects.get(run=leaf_run)
    for row in Run.objects.filter(trace_id=run.trace_id):
        assert row.total_tokens == call.total_tokens
        assert row.total_cost_usd == call.cost_usd
        assert row.llm_calls == 1


def test_a_cancelled_run_ends_cancelled_and_starts_nothing_new(driver, acme):
    from runs.services import run_cancel

    one = EntityFactory(workspace=acme, name="c1", io_contract=io(None, ok="boolean"))
    two = EntityFactory(workspace=acme, name="c2", io_contract=io(None, ok="boolean"))
    parent = EntityFactory(workspace=acme, name="cp", type="AGENT", children=[one, two])
    run = run_start(entity=parent, input_data={})
    driver.engine.advance(str(run.pk))  # starts c1 and waits
    first_child = Run.objects.get(parent=run)
    run_cancel(run=run)
    driver.queue.clear()
    driver.queue.extend([str(first_child.pk), str(run.pk)])
    driver.drain()

    run.refresh_from_db()
    first_child.refresh_from_db()
    assert first_child.status == "CANCELLED"
    assert run.status == "CANCELLED"
    assert not Run.objects.filter(parent=run, entity=two).exists()


def test_a_user_without_the_operator_role_cannot_start_a_run(db, acme, alice):
    from runs.services import RunRefused

    action = EntityFactory(workspace=acme, name="guarded", io_contract=io(None, ok="boolean"))
    with pytest.raises(RunRefused) as refused:
        run_start(entity=action, input_data={}, user=alice)
    assert refused.value.code == "PERMISSION_DENIED"
    assert not Run.objects.exists()


def test_a_tool_without_an_implementation_fails_the_run_before_any_step(driver, acme):
    manual = tool_definition("manual", implementation=None)
    action = EntityFactory(
        workspace=acme,
        name="manual_work",
        tools=[manual],
        planning=static_plan(step(1, "Do it", "TOOL_CALL", tool_id="manual")),
    )
    run = driver.run(action, {})
    assert run.status == "FAILED"
    assert run.error_code == "VALIDATION_ERROR"
    assert "manual" in run.error_message
    assert not StepRun.objects.filter(run=run).exists()
