"""The editor's Input and output section: the contract built field by field as rows, shown as
the JSON Schema it makes; what the rows cannot say kept as it is; problems at their row.

POST data is what a browser would send for the rendered page (`page_form`)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

import designer.views.editor as views
from entities.definition import Problem
from entities.models import Entity
from tests.factories import EntityFactory
from tests.support.clients import signed_in
from tests.support.page_form import form_data

pytestmark = pytest.mark.django_db

NESTED = {
    "type": "object",
    "properties": {"street": {"type": "string"}},
    "required": ["street"],
}
INPUT = {
    "type": "object",
    "title": "Kept title",
    "properties": {
        # `x-order`: the rows' order, which PostgreSQL's jsonb does not keep by itself.
        "channel": {
            "type": "string",
            "enum": ["#general", "#releases"],
            "default": "#releases",
            "x-order": 1,
        },
        "message": {
            "type": "string",
            "minLength": 10,
            "maxLength": 280,
            "description": "Text",
            "x-order": 2,
        },
        "address": NESTED,
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "ref": {"$ref": "#/$defs/thing"},
        "count": {"type": "integer", "minimum": 1, "x-order": 3},
    },
    "required": ["message", "address", "elsewhere"],
    "$defs": {"thing": {"type": "number"}},
    "additionalProperties": False,
}


def url(entity: Entity, name: str = "entity") -> str:
    return reverse(f"designer:{name}", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


def shown(client: Client, address: str) -> dict:
    response = client.get(address)
    assert response.status_code == 200
    return form_data(response.content, "editor")


def rows(data: dict, part: str) -> list[dict]:
    """The rows of `part` as the page holds them, by field."""
    prefix = f"contract-{part}-"
    count = int(data[prefix + "TOTAL_FORMS"])
    return [
        {
            key[len(f"{prefix}{i}-") :]: value
            for key, value in data.items()
            if key.startswith(f"{prefix}{i}-")
        }
        for i in range(count)
    ]


def with_row(client: Client, entity: Entity, data: dict, part: str, **fields: str) -> dict:
    """The page after "Add a field" and filling the new row in."""
    response = client.post(url(entity), data | {"add_row": f"contract-{part}"})
    assert response.status_code == 200
    page = form_data(response.content, "editor")
    index = int(page[f"contract-{part}-TOTAL_FORMS"]) - 1
    return page | {f"contract-{part}-{index}-{k}": v for k, v in fields.items()}


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def agent(acme):
    return EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        identity={"name": "writer", "persona": {"system_prompt": "You write scripts."}},
    )


@pytest.fixture
def announcer(acme):
    return EntityFactory(
        workspace=acme,
        name="announcer",
        type="ACTION",
        io_contract={"input": {"schema": INPUT}},
    )


def test_a_contract_built_from_rows_saves_its_json_schema_and_comes_back_as_rows(designer, agent):
    data = shown(designer, url(agent))
    assert data["contract-input-TOTAL_FORMS"] == "0"
    data = with_row(
        designer,
        agent,
        data,
        "input",
        name="topic",
        type="string",
        required="on",
        description="What to write about",
        minimum="3",
        maximum="80",
    )
    data = with_row(
        designer, agent, data, "input", name="tone", type="string", enum="warm, dry , warm"
    )
    data = with_row(
        designer, agent, data, "input", name="words", type="integer", minimum="50", maximum="500"
    )
    data = with_row(designer, agent, data, "input", name="draft", type="boolean")
    data = with_row(designer, agent, data, "output", name="lines", type="array_text")
    data = with_row(
        designer, agent, data, "output", name="score", type="number", enum="0.5, 1, 2.25"
    )
    response = designer.post(url(agent), data | {"op": "save"})
    assert response.status_code == 302, response.content.decode()[:4000]
    agent.refresh_from_db()
    assert agent.io_contract["input"]["schema"] == {
        "type": "object",
        "properties": {
            "topic": {
                "type": "string",
                "description": "What to write about",
                "minLength": 3,
                "maxLength": 80,
                "x-order": 1,  # the rows' order, which PostgreSQL's jsonb would not keep
            },
            "tone": {"type": "string", "enum": ["warm", "dry"], "x-order": 2},
            "words": {"type": "integer", "minimum": 50, "maximum": 500, "x-order": 3},
            "draft": {"type": "boolean", "x-order": 4},
        },
        "required": ["topic"],
    }
    assert agent.io_contract["output"]["schema"]["properties"] == {
        "lines": {"type": "array", "items": {"type": "string"}, "x-order": 1},
        "score": {"type": "number", "enum": [0.5, 1, 2.25], "x-order": 2},
    }
    page = shown(designer, url(agent))
    back = rows(page, "input")
    assert [(r["name"], r["type"]) for r in back] == [
        ("topic", "string"),
        ("tone", "string"),
        ("words", "integer"),
        ("draft", "boolean"),
    ]
    assert back[0]["required"] == "on" and "required" not in back[1]
    assert (back[0]["minimum"], back[0]["maximum"]) == ("3", "80")
    assert back[1]["enum"] == "warm, dry"
    assert rows(page, "output")[1]["enum"] == "0.5, 1, 2.25"
    # Saved again as shown: the same schema, no new version.
    before = agent.version
    assert designer.post(url(agent), page | {"op": "save"}).status_code == 302
    agent.refresh_from_db()
    assert agent.version == before


def test_what_the_rows_cannot_say_is_kept_as_it_is(designer, announcer):
    page = shown(designer, url(announcer))
    body = designer.get(url(announcer)).content.decode()
    assert [r["name"] for r in rows(page, "input")] == ["channel", "message", "count"]
    kept = body[body.index("Edited in the JSON view") :]
    for name in ("address", "code", "ref"):
        assert f"<code>{name}</code>" in kept
    # Rename a row, drop one, change another: the kept parts stay, the default follows.
    data = page | {
        "contract-input-0-name": "room",
        "contract-input-1-required": "",
        "contract-input-2-DELETE": "on",
        "op": "save",
    }
    data.pop("contract-input-1-required")
    response = designer.post(url(announcer), data)
    assert response.status_code == 302, response.content.decode()[:4000]
    announcer.refresh_from_db()
    schema = announcer.io_contract["input"]["schema"]
    assert schema["properties"] == {
        "room": {
            "type": "string",
            "enum": ["#general", "#releases"],
            "default": "#releases",
            "x-order": 1,
        },
        "message": {
            "type": "string",
            "description": "Text",
            "minLength": 10,
            "maxLength": 280,
            "x-order": 2,
        },
        "address": NESTED,
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "ref": {"$ref": "#/$defs/thing"},
    }
    assert schema["required"] == ["address", "elsewhere"]
    assert schema["$defs"] == {"thing": {"type": "number"}}
    assert schema["title"] == "Kept title"
    assert schema["additionalProperties"] is False


def test_the_check_shows_the_schema_the_rows_make(designer, announcer):
    data = shown(designer, url(announcer)) | {"contract-input-2-maximum": "9"}
    response = designer.post(url(announcer, "entity_check"), data)
    body = response.content.decode()
    preview = body[body.index('id="schema-input" hx-swap-oob="true"') :]
    preview = preview[: preview.index("</pre>")]
    assert "&quot;maximum&quot;: 9" in preview
    assert "&quot;$ref&quot;" in preview  # the kept parts are in it too
    assert 'id="schema-output" hx-swap-oob="true"' in body


def test_a_duplicate_name_is_refused_at_its_row(designer, announcer):
    data = shown(designer, url(announcer)) | {"contract-input-1-name": "channel"}
    response = designer.post(url(announcer), data | {"op": "save"})
    assert response.status_code == 422
    section = response.context["editor"].sections[3]
    second = section.rowsets["input"].forms[1]
    assert second.errors["name"] == ["Another input field has this name."]
    assert "name" not in section.rowsets["input"].forms[0].errors
    # A name a kept field has is refused too; the same name in the output is fine.
    data = shown(designer, url(announcer)) | {"contract-input-1-name": "address"}
    response = designer.post(url(announcer, "entity_check"), data)
    assert "An input field edited in the JSON view has this name." in response.content.decode()


def test_a_kept_default_outside_new_choices_is_named_at_the_choices(designer, announcer):
    data = shown(designer, url(announcer)) | {"contract-input-0-enum": "#general, #random"}
    response = designer.post(url(announcer), data | {"op": "save"})
    assert response.status_code == 422
    row = response.context["editor"].sections[3].rowsets["input"].forms[0]
    assert row.errors["enum"] == [
        'The default, "#releases" (set in the JSON view), is not one of the choices.'
    ]
    announcer.refresh_from_db()
    assert announcer.io_contract["input"]["schema"]["properties"]["channel"]["enum"] == [
        "#general",
        "#releases",
    ]


def test_the_services_problems_land_on_the_row_and_the_kept_field(designer, agent):
    data = shown(designer, url(agent))
    document = json.loads(data["document"])
    document["io_contract"]["input"]["schema"] = {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "minimum": 1},
            "odd": {"type": "string", "pattern": "(a+)+\\1"},
        },
    }
    page = form_data(
        designer.post(url(agent), data | {"raw": json.dumps(document), "op": "fields"}).content,
        "editor",
    )
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    section = response.context["editor"].sections[3]
    problems = section.form.non_field_errors()
    assert any(p.startswith("Input field odd: ") for p in problems), problems
    assert response.context["editor"].general == []


def test_a_services_problem_is_placed_at_the_rows_field(designer, agent, monkeypatch):
    """Whatever the services say of a row's keyword lands on the field that edits it."""
    data = with_row(designer, agent, shown(designer, url(agent)), "input", name="n", type="number")
    monkeypatch.setattr(
        views,
        "entity_validate",
        lambda **kw: [
            Problem("io_contract.input.schema.properties.n.maximum", "is too big"),
            Problem("io_contract.input.schema.properties.n", "is odd"),
            Problem("io_contract.output.schema.required", "is wrong"),
            Problem("io_contract.input.validation_rules[0].validator", "not ours"),
        ],
    )
    response = designer.post(url(agent, "entity_check"), data)
    editor = response.context["editor"]
    row = editor.sections[3].rowsets["input"].forms[0]
    assert row.errors["maximum"] == ["is too big"]
    assert row.non_field_errors() == ["is odd"]
    assert editor.sections[3].form.non_field_errors() == ["Output: is wrong"]
    assert [p.path for p in editor.general] == ["io_contract.input.validation_rules[0].validator"]


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"name": "2fast"}, "name", "does not start with a digit"),
        ({"name": "a b"}, "name", "letters, digits and"),
        ({"name": "a\x00b"}, "name", "Null characters are not allowed."),
        ({"name": "n", "type": "number", "minimum": "1e400"}, "minimum", "Enter a number."),
        ({"name": "n", "type": "number", "maximum": "1e16"}, "maximum", "less than or equal"),
        ({"name": "n", "type": "number", "enum": "1, two"}, "enum", "“two” is not a number."),
        ({"name": "n", "type": "integer", "enum": "1.5"}, "enum", "not a whole number"),
        ({"name": "n", "type": "number", "enum": "1e400"}, "enum", "is not a number"),
        ({"name": "n", "type": "boolean", "enum": "yes"}, "enum", "Choices are for text"),
        ({"name": "n", "type": "object", "minimum": "1"}, "minimum", "has no bounds"),
        ({"name": "n", "type": "string", "minimum": "1.5"}, "minimum", "whole number"),
        ({"name": "n", "type": "string", "minimum": "-1"}, "minimum", "cannot be below 0"),
        ({"name": "n", "type": "number", "minimum": "5", "maximum": "1"}, "maximum", "below"),
        ({"name": "n", "type": "date"}, "type", "Select a valid choice."),
    ],
)
def test_bad_input_is_named_at_its_field_and_nothing_is_lost(designer, agent, fields, field, says):
    data = with_row(designer, agent, shown(designer, url(agent)), "input", **fields)
    data |= {"identity-display_name": "Kept"}
    response = designer.post(url(agent), data | {"op": "save"})
    assert response.status_code == 422
    row = response.context["editor"].sections[3].rowsets["input"].forms[0]
    assert says in " ".join(row.errors[field]), row.errors
    page = form_data(response.content, "editor")
    assert page["identity-display_name"] == "Kept"
    agent.refresh_from_db()
    assert agent.io_contract["input"]["schema"].get("properties", {}) == {}


def test_ten_thousand_rows_are_refused_not_a_500(designer, agent):
    data = shown(designer, url(agent)) | {"contract-input-TOTAL_FORMS": "10000", "op": "save"}
    for index in range(200):
        data[f"contract-input-{index}-name"] = f"f{index}"
        data[f"contract-input-{index}-type"] = "string"
    response = designer.post(url(agent), data)
    assert response.status_code == 422
    assert "Please submit at most 100 forms." in response.content.decode()
    assert designer.post(url(agent, "entity_check"), data).status_code == 200


def test_a_property_of_several_types_is_kept_as_it_is():
    from designer.editor.contract import row_of

    assert row_of("id", {"type": ["integer", "null"]}, []) is None
    assert row_of("id", {"type": {"nested": 1}}, []) is None


def test_the_state_contract_is_edited_as_keys_and_saved(designer, agent):
    page = shown(designer, url(agent))
    assert (page["contract-reads_from"], page["contract-writes_to"]) == ("", "")
    data = page | {
        "contract-reads_from": "topic, tone , topic",
        "contract-writes_to": "summary",
        "op": "save",
    }
    response = designer.post(url(agent), data)
    assert response.status_code == 302, response.content.decode()[:4000]
    agent.refresh_from_db()
    state = agent.io_contract["state_contract"]
    assert (state["reads_from"], state["writes_to"]) == (["topic", "tone"], ["summary"])
    again = shown(designer, url(agent))
    assert (again["contract-reads_from"], again["contract-writes_to"]) == ("topic, tone", "summary")
