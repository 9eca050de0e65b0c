"""The editor's Children section: a child picked by name, how it runs, its condition built as
rows, what it is given; refusals at the child's row; the picker scoped and bounded."""

from __future__ import annotations

import json
import re

import pytest
from django import forms
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from designer.editor.condition_fields import ConditionFields
from entities.models import Entity
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.designer import shown, url
from tests.support.editor import section
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def agent(acme):
    return EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"country": {"type": "string"}}}}
        },
    )


@pytest.fixture
def skill(acme):
    return EntityFactory(
        workspace=acme,
        name="summarise",
        type="SKILL",
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        },
    )


def with_child_row(client: Client, entity: Entity) -> dict:
    page = shown(client, url(entity)) | {"add_row": "children-children"}
    response = client.post(url(entity), page)
    assert response.status_code == 200
    return form_data(response.content, "editor")


def saved_children(entity: Entity) -> list[dict]:
    entity.refresh_from_db()
    return [
        {
            "child": link.child.name,
            "relationship": link.relationship,
            "condition": link.condition,
            "input_mapping": link.input_mapping,
        }
        for link in entity.child_links.order_by("order")
    ]


def test_it_adds_a_child_by_name_and_saves(designer, agent, skill):
    page = with_child_row(designer, agent) | {"children-children-0-child": "summarise"}
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 302, response.content.decode()[:3000]
    assert saved_children(agent)[0]["child"] == "summarise"
    # Shown again by name, its input field offered to map.
    page = shown(designer, url(agent))
    assert page["children-children-0-child"] == "summarise"
    assert page["children-children-0-map_0_key"] == "text"


def add_child(client: Client, parent: Entity, name: str) -> None:
    page = with_child_row(client, parent)
    index = int(page["children-children-TOTAL_FORMS"]) - 1
    page |= {f"children-children-{index}-child": name, "op": "save"}
    response = client.post(url(parent), page)
    assert response.status_code == 302, response.content.decode()[:3000]


def test_a_condition_built_from_rows_saves_its_jsonlogic(designer, agent, skill):
    add_child(designer, agent, "summarise")
    page = shown(designer, url(agent)) | {
        "children-children-0-relationship": "CONDITIONAL",
        "children-children-0-condition_0_field": "input.country",
        "children-children-0-condition_0_op": "one_of",
        "children-children-0-condition_0_value": "FR, DE",
        "children-children-0-map_0": "input.country",
        "op": "save",
    }
    assert designer.post(url(agent), page).status_code == 302
    (link,) = saved_children(agent)
    assert link["relationship"] == "CONDITIONAL"
    assert link["condition"]["enabled"] is True
    assert link["condition"]["expression"] == {"in": [{"var": "input.country"}, ["FR", "DE"]]}
    assert link["input_mapping"] == {"text": {"var": "input.country"}}
    # Shown as rows again, with a spare line for one more.
    page = shown(designer, url(agent)) | {
        "children-children-0-condition_join": "any",
        "children-children-0-condition_1_field": "input.country",
        "children-children-0-condition_1_op": "not_empty",
        "op": "save",
    }
    assert page["children-children-0-condition_0_value"] == "FR, DE"
    assert page["children-children-0-map_0"] == "input.country"
    assert designer.post(url(agent), page).status_code == 302
    (link,) = saved_children(agent)
    assert link["condition"]["expression"] == {
        "or": [
            {"in": [{"var": "input.country"}, ["FR", "DE"]]},
            {"!!": {"var": "input.country"}},
        ]
    }


def test_a_conditional_child_without_a_condition_is_told_at_its_row(designer, agent, skill):
    add_child(designer, agent, "summarise")
    page = shown(designer, url(agent)) | {
        "children-children-0-relationship": "CONDITIONAL",
        "op": "save",
    }
    response = designer.post(url(agent), page)
    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert "build the condition" in str(row.errors["condition_0_field"])


def test_jsonlogic_rows_cannot_say_is_kept_and_edited_raw(designer, agent, skill):
    add_child(designer, agent, "summarise")
    nested = {
        "and": [
            {"or": [{"==": [{"var": "input.country"}, "FR"]}, {">": [{"var": "iteration"}, 2]}]},
            {"!!": {"var": "input.country"}},
        ]
    }
    page = shown(designer, url(agent)) | {
        "children-children-0-relationship": "CONDITIONAL",
        "children-children-0-condition_raw": json.dumps(nested),
        "op": "save",
    }
    assert designer.post(url(agent), page).status_code == 302
    assert saved_children(agent)[0]["condition"]["expression"] == nested
    page = shown(designer, url(agent))
    assert page["children-children-0-condition_mode"] == "raw"
    assert page["children-children-0-condition_0_field"] == ""
    # Saved again untouched: kept as it was.
    assert designer.post(url(agent), page | {"op": "save"}).status_code == 302
    assert saved_children(agent)[0]["condition"]["expression"] == nested
    # A broken edit is named at the box, and the text is kept.
    page |= {"children-children-0-condition_raw": '{"nope": [1]}', "op": "save"}
    response = designer.post(url(agent), page)
    assert response.status_code == 422
    assert "unknown operator" in response.content.decode()
    assert form_data(response.content, "editor")["children-children-0-condition_raw"] == (
        '{"nope": [1]}'
    )


def test_a_cycle_is_refused_at_the_childs_row(designer, acme):
    lower = EntityFactory(workspace=acme, name="lower", type="AGENT")
    upper = EntityFactory(workspace=acme, name="upper", type="AGENT", children=[lower])
    page = with_child_row(designer, lower) | {"children-children-0-child": "upper"}
    response = designer.post(url(lower), page | {"op": "save"})
    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert "cycle" in str(row.errors["child"]), response.context["editor"].problems
    assert upper.name in str(row.errors["child"])
    assert lower.child_links.count() == 0


def test_a_child_of_a_higher_level_is_refused_at_its_row(designer, acme, skill):
    process = EntityFactory(workspace=acme, name="hiring", type="PROCESS")
    page = with_child_row(designer, skill) | {"children-children-0-child": "hiring"}
    response = designer.post(url(skill), page | {"op": "save"})
    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert "higher level than its parent" in str(row.errors["child"])
    assert process.parent_links.count() == 0


def test_an_unknown_child_is_named_at_its_row_and_kept(designer, agent):
    page = with_child_row(designer, agent) | {"children-children-0-child": "ghost"}
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    row = section(response, "children").rowsets["children"].forms[0]
    assert "no entity 'ghost'" in " ".join(row.errors["child"])
    assert form_data(response.content, "editor")["children-children-0-child"] == "ghost"


def test_the_check_places_a_childs_problem_in_its_slot(designer, agent):
    page = with_child_row(designer, agent) | {"children-children-0-child": "ghost"}
    body = designer.post(url(agent, "entity_check"), page).content.decode()
    assert 'id="err-children-children-0-child" hx-swap-oob="true"><li>' in body


def test_children_are_reordered_by_their_rows(designer, agent, skill, acme):
    EntityFactory(workspace=acme, name="fetch", type="ACTION")
    add_child(designer, agent, "summarise")
    add_child(designer, agent, "fetch")
    page = shown(designer, url(agent)) | {
        "children-children-0-child": "fetch",
        "children-children-1-child": "summarise",
        "op": "save",
    }
    assert designer.post(url(agent), page).status_code == 302
    assert [c["child"] for c in saved_children(agent)] == ["fetch", "summarise"]


def picks(client: Client, workspace: str, **query: str) -> str:
    address = reverse("designer:pick_children", kwargs={"workspace": workspace})
    response = client.get(address, query)
    assert response.status_code == 200
    return response.content.decode().strip()


def test_the_picker_offers_only_what_may_be_a_child_here(designer, acme, globex, agent, skill):
    EntityFactory(workspace=acme, name="sum-process", type="PROCESS")
    EntityFactory(workspace=globex, name="summary-elsewhere", type="SKILL")
    found = picks(designer, "acme", q="sum", type="AGENT")
    assert 'value="summarise"' in found
    assert "sum-process" not in found  # a higher level
    assert "elsewhere" not in found  # another workspace's
    assert picks(designer, "acme", q="sum", type="ACTION") == ""
    # For a saved entity, not itself, nor its ancestors, nor its children already.
    add_child(designer, agent, "summarise")
    found = picks(designer, "acme", q="", entity=str(skill.pk))
    assert "writer" not in found and "summarise" not in found
    # Typed in a child's box, the box's name carries the text.
    found = picks(designer, "acme", **{"children-children-3-child": "summ", "type": "AGENT"})
    assert 'value="summarise"' in found


def test_the_picker_is_bounded_and_escapes(designer, acme):
    for number in range(25):
        EntityFactory(workspace=acme, name=f"step{number:02d}", type="ACTION")
    EntityFactory(
        workspace=acme,
        name="esc",
        type="ACTION",
        identity={"name": "esc", "display_name": "<b>bold</b>", "description": "e"},
    )
    assert picks(designer, "acme", q="step", type="SKILL").count("<option") == 20
    assert "<b>" not in picks(designer, "acme", q="esc", type="SKILL")
    assert picks(designer, "acme", q="a\x00b", type="SKILL") == ""


def test_the_picker_is_not_for_another_workspace(charlie, agent):
    outsider = signed_in(Client, charlie)
    address = reverse("designer:pick_children", kwargs={"workspace": "acme"})
    assert outsider.get(address, {"q": "w"}).status_code == 404
    mine = reverse("designer:pick_children", kwargs={"workspace": "globex"})
    assert outsider.get(mine, {"entity": str(agent.pk)}).status_code == 404


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("children-children-0-child", "a\x00b", "Null characters are not allowed"),
        ("children-children-0-condition_0_value", "1e400", "too large"),
    ],
)
def test_bad_input_in_a_row_is_named(designer, agent, skill, field, value, says):
    add_child(designer, agent, "summarise")
    page = shown(designer, url(agent)) | {
        "children-children-0-relationship": "CONDITIONAL",
        "children-children-0-condition_0_field": "input.country",
        field: value,
        "op": "save",
    }
    response = designer.post(url(agent), page)
    assert response.status_code == 422
    assert says in response.content.decode()


def rows_posted(page: dict, count: int) -> dict:
    page = page | {"children-children-TOTAL_FORMS": str(count), "op": "save"}
    for index in range(count):
        page[f"children-children-{index}-child"] = "x"
        page[f"children-children-{index}-relationship"] = "SEQUENTIAL"
    return page


def test_too_many_rows_are_refused_by_name_never_a_500(designer, agent):
    page = shown(designer, url(agent))
    response = designer.post(url(agent), rows_posted(page, 150))
    assert response.status_code == 422
    assert "at most 100" in response.content.decode()
    for address in (url(agent), url(agent, "entity_check")):
        # Past the request's field limit: Django's 400, before any form is built.
        assert designer.post(address, rows_posted(page, 10_000)).status_code == 400
    agent.refresh_from_db()
    assert agent.child_links.count() == 0


def test_the_check_answers_only_the_slots_the_page_has(designer, agent):
    # The page shows one condition line and no slot for a row's Remove box; the bound form
    # grows a blank line after a post, which the page does not have until it is shown again.
    page = with_child_row(designer, agent) | {"children-children-0-child": "ghost"}
    assert "children-children-0-condition_1_field" not in page
    body = designer.post(url(agent, "entity_check"), page).content.decode()
    answered = set(re.findall(r'id="err-(children-children-0-[\w-]+)"', body))
    assert "children-children-0-child" in answered
    assert "children-children-0-condition_0_field" in answered
    assert "children-children-0-condition_1_field" not in answered
    assert "children-children-0-DELETE" not in answered


def test_blank_condition_lines_do_not_pile_up_across_posts():
    """Each post shows the lines typed and one blank line to add another, however many
    times the form goes back and forth."""

    class Form(forms.Form):
        pass

    data = QueryDict(mutable=True)
    for index in range(3):  # a typed line, then two blank ones posted back
        data[f"c_{index}_field"] = "input.topic" if index == 0 else ""
        data[f"c_{index}_value"] = ""
    form = Form(data)
    fields = ConditionFields(form, "c", label="Condition", expression=None, datalist="d")
    assert fields.lines == 2
