"""The editor's Plan section: steps as rows kept in step with the children, a step calling a
tool, exit conditions built as rows, problems at their step and field."""

from __future__ import annotations

import pytest
from django.test import Client

from entities.models import Entity
from entities.selectors import entity_definition
from tests.factories import EntityFactory, tool_definition
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.editor import section
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def fetch(acme):
    return EntityFactory(workspace=acme, name="fetch", type="ACTION")


@pytest.fixture
def agent(acme, fetch):
    return EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        children=[fetch],
        tools=[tool_definition("echo")],
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"topic": {"type": "string"}}}}
        },
    )


def steps_of(entity: Entity) -> list[dict]:
    entity.refresh_from_db()
    return [
        {
            "step_id": s.step_id,
            "order": s.order,
            "name": s.name,
            "type": s.type,
            "entity": s.target_entity.name if s.target_entity else None,
            "tool": s.target_tool_id or None,
            "exit_conditions": s.exit_conditions,
            "input_mapping": s.input_mapping,
        }
        for s in entity.plan_steps.order_by("order")
    ]


def save(client: Client, entity: Entity, page: dict) -> None:
    response = client.post(url(entity), page | {"op": "save"})
    assert response.status_code == 302, response.content.decode()[:3000]


def added_row(client: Client, entity: Entity, rowset: str, page: dict | None = None) -> dict:
    page = (page or shown(client, url(entity))) | {"add_row": rowset}
    return form_data(client.post(url(entity), page).content, "editor")


def test_turning_the_plan_on_starts_it_with_a_step_per_child(designer, agent):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    (step,) = steps_of(agent)
    assert step["type"] == "CHILD_ENTITY_INVOCATION"
    assert step["entity"] == "fetch"
    assert step["step_id"] == "step-001"
    assert step["name"] == "Invoke fetch"


def test_a_child_added_gets_its_step_and_a_removed_one_loses_it(designer, agent, acme):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    EntityFactory(workspace=acme, name="draft", type="SKILL")
    page = added_row(designer, agent, "children-children") | {"children-children-1-child": "draft"}
    save(designer, agent, page)
    assert [(s["order"], s["entity"]) for s in steps_of(agent)] == [(1, "fetch"), (2, "draft")]
    page = shown(designer, url(agent)) | {"children-children-0-DELETE": "on"}
    save(designer, agent, page)
    assert [(s["order"], s["entity"]) for s in steps_of(agent)] == [(1, "draft")]


def test_with_the_plan_off_children_add_no_steps(designer, agent, acme):
    EntityFactory(workspace=acme, name="draft", type="SKILL")
    page = added_row(designer, agent, "children-children") | {"children-children-1-child": "draft"}
    save(designer, agent, page)
    assert steps_of(agent) == []


def test_a_step_calls_a_tool_with_its_arguments_mapped(designer, agent):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = added_row(designer, agent, "plan-steps") | {
        "plan-steps-1-name": "Echo it",
        "plan-steps-1-type": "TOOL_CALL",
        "plan-steps-1-target": "tool:echo",
    }
    save(designer, agent, page)
    step = steps_of(agent)[1]
    assert (step["name"], step["tool"], step["entity"]) == ("Echo it", "echo", None)
    # Picked, the tool's parameters are offered to map; the fields available there include
    # the first step's output, under its name.
    page = shown(designer, url(agent))
    assert page["plan-steps-1-map_0_key"] == "text"
    body = designer.get(url(agent)).content.decode()
    assert '<datalist id="paths-plan-steps-1"><option value="input.topic">' in body
    assert '<option value="Invoke fetch">' in body
    save(designer, agent, page | {"plan-steps-1-map_0": "Invoke fetch"})
    assert steps_of(agent)[1]["input_mapping"] == {"text": {"var": "Invoke fetch"}}
    save(designer, agent, shown(designer, url(agent)) | {"plan-steps-1-map_0": "42"})
    assert steps_of(agent)[1]["input_mapping"] == {"text": 42}


def test_a_step_calling_a_child_needs_one_picked(designer, agent):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = shown(designer, url(agent)) | {"plan-steps-0-target": "", "op": "save"}
    response = designer.post(url(agent), page)
    assert response.status_code == 422
    row = section(response, "plan").rowsets["steps"].forms[0]
    assert row.errors["target"] == ["Pick the child this step calls."]


def test_exit_conditions_are_built_as_rows(designer, agent):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = shown(designer, url(agent)) | {
        "plan-steps-0-exit_0_0_field": "input.topic",
        "plan-steps-0-exit_0_0_op": "empty",
        "plan-steps-0-exit_0_next": "ESCALATE",
    }
    save(designer, agent, page)
    (step,) = steps_of(agent)
    assert step["exit_conditions"] == [
        {"condition": {"!": {"var": "input.topic"}}, "next_step": "ESCALATE"}
    ]
    page = shown(designer, url(agent))
    assert page["plan-steps-0-exit_0_0_op"] == "empty"
    assert page["plan-steps-0-exit_0_next"] == "ESCALATE"
    # A condition with nowhere to go, and a place with no condition, are named at their field.
    page |= {"plan-steps-0-exit_1_0_field": "iteration", "plan-steps-0-exit_1_0_value": "3"}
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    row = section(response, "plan").rowsets["steps"].forms[0]
    assert "where the run goes" in str(row.errors["exit_1_next"])


def test_a_services_problem_is_at_its_step_and_field(designer, agent, acme):
    other = EntityFactory(workspace=acme, name="other", type="ACTION")
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = added_row(designer, agent, "plan-steps") | {
        "plan-steps-1-name": "Stray",
        "plan-steps-1-type": "CHILD_ENTITY_INVOCATION",
        "plan-steps-1-target": f"entity:{other.ref}",
    }
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    row = section(response, "plan").rowsets["steps"].forms[1]
    assert "is not a child of this entity" in " ".join(row.errors["target"])
    # The same through the check, in the row's slot.
    body = designer.post(url(agent, "entity_check"), page).content.decode()
    assert 'id="err-plan-steps-1-target" hx-swap-oob="true"><li>' in body
    # Nothing of it lands on the plan's own fields.
    assert section(response, "plan").form.errors == {}


def test_steps_follow_their_rows_and_exits_follow_their_step(designer, agent, acme):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = added_row(designer, agent, "plan-steps") | {
        "plan-steps-1-name": "Think",
        "plan-steps-1-type": "THOUGHT",
    }
    save(designer, agent, page)
    # Step 1 exits to step 2 ("Think"); then the rows are swapped.
    page = shown(designer, url(agent)) | {
        "plan-steps-0-exit_0_0_field": "iteration",
        "plan-steps-0-exit_0_0_op": "gt",
        "plan-steps-0-exit_0_0_value": "1",
        "plan-steps-0-exit_0_next": "2",
    }
    save(designer, agent, page)
    page = shown(designer, url(agent))
    first = {k[len("plan-steps-0-") :]: v for k, v in page.items() if k.startswith("plan-steps-0-")}
    second = {
        k[len("plan-steps-1-") :]: v for k, v in page.items() if k.startswith("plan-steps-1-")
    }
    page |= {f"plan-steps-0-{k}": v for k, v in second.items()}
    page |= {f"plan-steps-1-{k}": v for k, v in first.items()}
    # Swapped, the exit goes back to an earlier step: a loop, which needs passes to loop.
    save(designer, agent, page | {"plan-max_iterations": "3"})
    steps = steps_of(agent)
    assert [s["name"] for s in steps] == ["Think", "Invoke fetch"]
    assert steps[1]["exit_conditions"][0]["next_step"] == 1  # still "Think"


def test_a_loop_back_is_refused_at_its_exit_until_the_plan_may_make_more_passes(designer, agent):
    save(designer, agent, shown(designer, url(agent)) | {"plan-enabled": "on"})
    page = added_row(designer, agent, "plan-steps") | {
        "plan-steps-1-name": "Review",
        "plan-steps-1-type": "THOUGHT",
        "plan-steps-1-exit_0_0_field": "iteration",
        "plan-steps-1-exit_0_0_op": "lt",
        "plan-steps-1-exit_0_0_value": "3",
        "plan-steps-1-exit_0_next": "1",
    }
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    assert "planning.loop_control.max_iterations is 1" in response.content.decode()
    assert len(steps_of(agent)) == 1  # nothing saved

    save(designer, agent, page | {"plan-max_iterations": "4", "plan-on_exhausted": "FAIL"})
    loop_control = entity_definition(entity=Entity.objects.get(pk=agent.pk))["planning"][
        "loop_control"
    ]
    assert (loop_control["max_iterations"], loop_control["on_exhausted"]) == (4, "FAIL")
    assert steps_of(agent)[1]["exit_conditions"][0]["next_step"] == 1
