"""Design-time validation of `capabilities.delegation` and DELEGATE steps (hiring
subordinates at run time, runs/engine/hiring.py): templates are entities of the workspace
the hierarchy's type rule allows as children, the numbers are bounded, and a DELEGATE step
hires from a template of an entity whose delegation is enabled. Each refusal names its
field and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from entities.definition import DefinitionInvalid, Problem
from entities.exchange import definition_of
from entities.models import Entity, PlanStep
from entities.services import entity_save
from runs.engine import planning
from runs.engine.ports import ModelReply
from tests.factories import EntityFactory, definition

pytestmark = [pytest.mark.smoke]


def refused(workspace: Any, raw: dict) -> list[Problem]:
    before = (Entity.objects.count(), PlanStep.objects.count())
    with pytest.raises(DefinitionInvalid) as refusal:
        entity_save(workspace=workspace, definition=raw)
    assert (Entity.objects.count(), PlanStep.objects.count()) == before
    return refusal.value.problems


def at(problems: list[Problem], path: str) -> str:
    messages = [p.message for p in problems if p.path == path]
    assert len(messages) == 1, f"expected one problem at {path!r}, got {problems}"
    return messages[0]


def hirer(delegation: dict, *steps: dict, type: str = "AGENT") -> dict:  # noqa: A002
    sections: dict[str, Any] = {"capabilities": {"delegation": delegation}}
    if steps:
        sections["planning"] = {"static_plan": {"enabled": True, "steps": list(steps)}}
    return definition("boss", type, **sections)


def delegate(order: int, template: str, **hire: Any) -> dict:
    return {
        "step_id": f"s{order}",
        "order": order,
        "name": f"Hire {order}",
        "type": "DELEGATE",
        "target": {"entity_id": template, "hire": {"role": "Analyst", "task": "Look", **hire}},
    }


def test_a_hirer_with_a_template_and_a_delegate_step_is_saved_and_exported(acme):
    EntityFactory(workspace=acme, name="analyst", type="SKILL")
    saved = entity_save(
        workspace=acme,
        definition=hirer(
            {"enabled": True, "templates": ["analyst"], "max_budget_usd_each": 0.5},
            delegate(1, "analyst", budget_usd=0.25, reason="needs numbers"),
        ),
    )
    exported = definition_of(saved.entity)
    delegation = exported["capabilities"]["delegation"]
    assert delegation == {
        "enabled": True,
        "templates": ["analyst"],
        "max_subordinates": 5,
        "max_budget_usd_each": 0.5,
    }
    (step,) = exported["planning"]["static_plan"]["steps"]
    assert step["type"] == "DELEGATE"
    assert step["target"]["hire"] == {
        "role": "Analyst",
        "task": "Look",
        "budget_usd": 0.25,
        "reason": "needs numbers",
    }


def test_a_template_must_be_an_entity_of_the_workspace(acme, globex):
    EntityFactory(workspace=globex, name="elsewhere", type="SKILL")
    problems = refused(acme, hirer({"enabled": True, "templates": ["elsewhere"]}))
    message = at(problems, "capabilities.delegation.templates[0]")
    assert "no entity 'elsewhere' in this workspace to hire from" in message


def test_a_template_follows_the_type_rule_of_the_hierarchy(acme):
    EntityFactory(workspace=acme, name="director", type="PROCESS")
    problems = refused(acme, hirer({"enabled": True, "templates": ["director"]}, type="SKILL"))
    message = at(problems, "capabilities.delegation.templates[0]")
    assert message.startswith("as a hire: ")
    assert "a child is never of a higher level than its parent" in message


def test_enabled_delegation_needs_a_template(acme):
    problems = refused(acme, hirer({"enabled": True, "templates": []}))
    assert "name at least one template" in at(problems, "capabilities.delegation.templates")


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_subordinates", 0), ("max_subordinates", 101), ("max_budget_usd_each", 0)],
)
def test_the_numbers_are_bounded(acme, field, value):
    problems = refused(acme, hirer({"enabled": False, field: value}))
    assert any(p.path == f"capabilities.delegation.{field}" for p in problems), problems


def test_a_delegate_step_needs_delegation_and_one_of_its_templates(acme):
    EntityFactory(workspace=acme, name="analyst", type="SKILL")
    EntityFactory(workspace=acme, name="other", type="SKILL")
    problems = refused(acme, hirer({"enabled": False}, delegate(1, "analyst")))
    path = "planning.static_plan.steps[0].target.entity_id"
    assert "enable capabilities.delegation first" in at(problems, path)

    problems = refused(
        acme, hirer({"enabled": True, "templates": ["analyst"]}, delegate(1, "other"))
    )
    assert "'other' is not one of capabilities.delegation.templates" in at(problems, path)


def test_a_delegate_step_needs_its_hire(acme):
    EntityFactory(workspace=acme, name="analyst", type="SKILL")
    step = delegate(1, "analyst")
    del step["target"]["hire"]
    problems = refused(acme, hirer({"enabled": True, "templates": ["analyst"]}, step))
    message = at(problems, "planning.static_plan.steps[0].target.hire")
    assert "is required for a DELEGATE step" in message


# -- a dynamic plan may hire (runs/engine/planning.py) ----------------------------------------


def _reply(steps: list[dict]) -> ModelReply:
    return ModelReply("", 0, 0, 0, 0, "local", "offline", parsed={"steps": steps})  # type: ignore[arg-type]


def test_a_dynamic_plan_offers_and_reads_delegate_steps_only_when_delegation_is_enabled():
    rules = {"enabled": True, "templates": ["analyst"], "max_subordinates": 5}
    draft: dict[str, Any] = {"capabilities": {"tools": [], "delegation": rules}}
    names = {"analyst": "Analyst"}

    schema = planning.plan_schema(draft, names)
    item = schema["properties"]["steps"]["items"]
    assert "DELEGATE:Analyst" in item["properties"]["target"]["enum"]
    assert {"role", "task", "budget_usd", "reason"} <= set(item["properties"])
    proposed = {
        "target": "DELEGATE:Analyst",
        "name": "Get numbers",
        "instruction": "",
        "role": "Numbers person",
        "task": "Count the widgets",
        "budget_usd": 0.2,
        "reason": "x" * 5000,
    }
    (step,) = planning.parse_dynamic_plan(_reply([proposed]), draft, names)
    assert step["type"] == "DELEGATE" and step["target_entity"] == "analyst"
    assert step["hire"]["role"] == "Numbers person"
    assert step["hire"]["task"] == "Count the widgets"
    assert step["hire"]["budget_usd"] == "0.2"
    assert len(step["hire"]["reason"]) == 1000  # bounded

    rules["enabled"] = False
    assert (
        "DELEGATE:Analyst"
        not in planning.plan_schema(draft, names)["properties"]["steps"]["items"]["properties"][
            "target"
        ]["enum"]
    )
    rejected = planning.parse_dynamic_plan(_reply([proposed]), draft, names)
    assert isinstance(rejected, planning.PlanRejected)
    assert "capabilities.delegation is disabled" in rejected.message
