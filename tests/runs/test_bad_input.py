"""Bad input at run time: each ends the run (or the step) with an error code of the seed's
families and a message a designer understands, and keeps every row written so far."""

from __future__ import annotations

import json

import pytest

from entities.models import ChildLink, Entity, PlanStep
from runs.models import LLMCall, Run, StepRun, ToolCall
from runs.services import run_start
from tests.factories import EntityFactory, tool_definition
from tests.support.queued_runs import Driver
from tests.support.runs import io, static_plan, step

pytestmark = pytest.mark.smoke


def test_a_child_deleted_after_the_run_started_fails_the_step(db, acme):
    first = EntityFactory(workspace=acme, name="early", io_contract=io(None, ok="boolean"))
    doomed = EntityFactory(workspace=acme, name="doomed", io_contract=io(None, ok="boolean"))
    parent = EntityFactory(workspace=acme, name="owner", type="AGENT", children=[first, doomed])
    driver = Driver()
    run = run_start(entity=parent, input_data={})
    driver.queue.append(str(run.pk))
    driver.engine.advance(driver.queue.pop(0))  # plans and starts `early`
    # The designer deletes `doomed` while the run is under way.
    ChildLink.objects.filter(child=doomed).delete()
    PlanStep.objects.filter(target_entity=doomed).delete()
    Entity.objects.filter(pk=doomed.pk).delete()
    driver.drain()

    run.refresh_from_db()
    assert run.status == "FAILED"
    assert run.error_code == "VALIDATION_ERROR"
    assert "no longer exists" in run.error_message
    assert Run.objects.get(parent=run).status == "COMPLETED"  # what ran is kept
    assert LLMCall.objects.filter(run__trace_id=run.trace_id).count() == 1


def test_a_tool_argument_outside_its_schema_fails_the_step_without_calling_it(db, acme):
    tool = tool_definition(
        "pick",
        implementation="json_extract",
        function_schema={
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"data": {"type": "object"}, "expression": {"type": "string"}},
                "required": ["data", "expression"],
            },
        },
    )
    plan_step = step(1, "Pick", "TOOL_CALL", tool_id="pick")
    plan_step["input_mapping"] = {"data": {"var": "input"}, "expression": 42}
    action = EntityFactory(
        workspace=acme, name="miscalled", tools=[tool], planning=static_plan(plan_step)
    )
    run = Driver().run(action, {})
    assert run.status == "FAILED"
    assert run.error_code == "VALIDATION_ERROR"
    assert "expression" in run.error_message
    call = ToolCall.objects.get(run=run)
    assert not call.success and call.input_parameters["expression"] == 42
    assert StepRun.objects.get(run=run).status == "FAILED"


def test_a_model_that_answers_invalid_json_fails_the_step_with_llm_error(
    db, acme, openai_server, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_BASE", openai_server.base_url)
    for _ in range(4):
        openai_server.reply_content("this is not JSON")
    action = EntityFactory(
        workspace=acme,
        name="remote",
        io_contract=io(None, answer="string"),
        logic_gate={
            "reasoning_config": {"model_provider": "openai", "model_name": "gpt-4o-mini"},
            "retry_policy": {
                "max_retries": 1,
                "backoff_strategy": "NONE",
                "retry_on": ["LLM_ERROR"],
            },
        },
    )
    driver = Driver()
    run = driver.run(action, {})
    for _ in range(3):
        if run.status != "RUNNING":
            break
        run_id, _delay = driver.later.pop(0)
        Run.objects.filter(pk=run_id).update(wake_at=None)
        driver.queue.append(run_id)
        driver.drain()
        run.refresh_from_db()

    assert run.status == "FAILED"
    assert run.error_code == "LLM_ERROR"
    assert "JSON" in run.error_message
    assert "sk-test-not-a-real-key" not in run.error_message
    assert StepRun.objects.filter(run=run).count() == 2  # the first attempt and one retry
    assert len(openai_server.requests) == 2


def test_a_real_models_hostile_delegate_calls_are_refused_one_by_one_and_heard(
    db, acme, openai_server, monkeypatch
):
    """A provider's model asks the delegate tool for what may not be hired: a template the
    entity does not have, a budget that is no number or no amount, text no column stores, an
    empty role. Each call is refused with its reason and the model reads them all; the one
    good hire of the turn is made, with its text made storable and bounded."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_BASE", openai_server.base_url)
    EntityFactory(
        workspace=acme,
        name="writer",
        type="SKILL",
        io_contract=io({"task": "string"}, text="string"),
    )
    coordinator = EntityFactory(
        workspace=acme,
        name="lead",
        type="AGENT",
        max_cost=1.0,
        logic_gate={
            "reasoning_config": {
                "model_provider": "openai",
                "model_name": "gpt-4o-mini",
                "reasoning_mode": "REACT",
            }
        },
        capabilities={"delegation": {"enabled": True, "templates": ["writer"]}},
        io_contract=io(None, answer="string"),
    )
    good = {"template": "writer", "role": "Wri\x00ter " * 50, "task": "t" * 9000, "reason": "r"}
    openai_server.reply_tool_calls(
        [
            ("delegate", {"template": "ghost", "role": "r", "task": "t", "reason": ""}),
            ("delegate", {"template": "writer", "role": "r", "task": "t", "budget_usd": "lots"}),
            ("delegate", {"template": "writer", "role": "r", "task": "t", "budget_usd": 1e400}),
            ("delegate", {"template": "writer", "role": "", "task": "t", "reason": ""}),
            ("delegate", good),
        ]
    )
    openai_server.reply_json({"answer": "done"})  # the lead, once it read the results
    run = Driver().run(coordinator, {})  # the writer answers with the offline model
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    (hired,) = Run.objects.filter(parent=run)
    assert hired.role == ("Wri\ufffdter " * 50).strip()[:200]
    assert len(hired.task) == 4000
    heard = json.dumps(openai_server.requests[-1].messages)
    for reason in (
        "may not hire 'ghost': it is not one of its delegation templates (writer)",
        "budget_usd 'lots' is not a number",
        "budget_usd 'Infinity' is not a finite amount",  # 1e400: JSON has no such number
        "a hire of 'writer' needs a role and a task",
    ):
        assert reason in heard
