"""The editor's governance section: budgets, limits, checkpoints and rails as fields, with
what the parents set shown beside."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.editor import section
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def skill(acme):
    return EntityFactory(workspace=acme, name="render", type="SKILL")


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


def test_it_saves_limits_in_the_definitions_units(designer, skill):
    data = shown(designer, url(skill)) | {
        "governance-max_cost_usd": "2.50",
        "governance-timeout": "90.5",
        "governance-max_llm_calls": "12",
        "governance-content_filters": ["PII", "TOXICITY"],
        "op": "save",
    }
    assert designer.post(url(skill), data).status_code == 302
    skill.refresh_from_db()
    assert skill.governance["cost_controls"]["max_cost_usd"] == 2.5
    assert skill.governance["execution_limits"]["timeout_ms"] == 90_500
    assert skill.governance["execution_limits"]["max_llm_calls"] == 12
    assert skill.governance["safety_rails"]["content_filters"] == ["PII", "TOXICITY"]
    again = shown(designer, url(skill))
    assert again["governance-timeout"] == "90.5"
    assert again["governance-max_cost_usd"] == "2.5"


def test_a_checkpoint_is_added_as_a_row(designer, skill):
    page = shown(designer, url(skill)) | {"add_row": "governance-checkpoints"}
    page = form_data(designer.post(url(skill), page).content, "editor")
    page |= {
        "governance-checkpoints-0-trigger": "CUSTOM_CONDITION",
        "governance-checkpoints-0-condition": '{">": [{"var": "input.amount"}, 1000]}',
        "governance-checkpoints-0-notification_channels": ["IN_APP", "EMAIL"],
        "governance-checkpoints-0-timeout": "3600",
        "op": "save",
    }
    response = designer.post(url(skill), page)
    assert response.status_code == 302, response.context["editor"].problems
    skill.refresh_from_db()
    (checkpoint,) = skill.governance["human_oversight"]["hitl_checkpoints"]
    assert checkpoint["condition"] == {">": [{"var": "input.amount"}, 1000]}
    assert checkpoint["timeout_ms"] == 3_600_000
    assert checkpoint["notification_channels"] == ["IN_APP", "EMAIL"]


@pytest.mark.parametrize(
    ("condition", "says"),
    [
        ("", "is required for a CUSTOM_CONDITION"),
        ('{"nope": [1]}', "JSONLogic"),
        ("{", "JSONLogic"),
    ],
)
def test_a_checkpoints_condition_problem_is_at_its_row(designer, skill, condition, says):
    page = shown(designer, url(skill)) | {"add_row": "governance-checkpoints"}
    page = form_data(designer.post(url(skill), page).content, "editor")
    page |= {
        "governance-checkpoints-0-trigger": "CUSTOM_CONDITION",
        "governance-checkpoints-0-condition": condition,
        "op": "save",
    }
    response = designer.post(url(skill), page)
    assert response.status_code == 422
    row = section(response, "governance").rowsets["checkpoints"].forms[0]
    assert says in str(row.errors), (row.errors, response.context["editor"].problems)


@pytest.mark.parametrize("value", ["-1", "1e400", "NaN", "99999999999"])
def test_a_budget_that_is_not_one_is_named(designer, skill, value):
    data = shown(designer, url(skill)) | {"governance-max_cost_usd": value, "op": "save"}
    response = designer.post(url(skill), data)
    assert response.status_code == 422
    assert "max_cost_usd" in section(response, "governance").form.errors


def test_what_the_parents_set_is_shown_beside(designer, acme, skill):
    EntityFactory(workspace=acme, name="studio", type="AGENT", children=[skill], max_cost=5)
    body = designer.get(url(skill)).content.decode()
    assert "Set on its parents: studio: $5.00" in body


def test_a_childs_budget_over_its_parents_is_named_at_the_field(designer, acme, skill):
    EntityFactory(workspace=acme, name="studio", type="AGENT", children=[skill], max_cost=5)
    data = shown(designer, url(skill)) | {"governance-max_cost_usd": "9", "op": "save"}
    response = designer.post(url(skill), data)
    assert response.status_code == 422
    errors = section(response, "governance").form.errors
    assert "more than its max_cost_usd" in str(errors["max_cost_usd"])
