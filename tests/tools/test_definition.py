"""A tool's implementation and output schema: schema, registry, admin, the demo tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse
from jsonschema import Draft202012Validator

from entities.definition import DefinitionInvalid, normalize_required, normalize_tool, tool_schema
from entities.services import entities_import
from runs.engine.synthesis import synthesize
from tests.factories import make_tool, tool_definition
from tests.support.page_form import form_data
from tests.tools.conftest import invocation
from tools.builtin import BUILTINS
from tools.models import Tool
from tools.runner import RegistryToolRunner
from tools.services import tool_upsert

pytestmark = pytest.mark.smoke

FIXTURE = Path(__file__).resolve().parents[2] / "entities" / "fixtures" / "video_ad_process.json"
DEMO_TOOLS = {
    "nlp_parser",
    "schema_validator",
    "script_generator",
    "video_renderer",
    "asset_uploader",
}


def problems(definition: dict) -> list[str]:
    return [str(problem) for problem in normalize_tool(definition)[1]]


def test_the_schema_lists_exactly_the_registered_built_ins():
    names = tool_schema()["properties"]["implementation"]["enum"]
    assert names == [None, *sorted(BUILTINS)]


def test_a_tool_has_no_implementation_and_no_output_schema_by_default(acme):
    tool = make_tool(acme)
    assert (tool.implementation, tool.output_schema) == (None, None)
    assert tool.as_definition()["implementation"] is None
    assert tool.as_definition()["output_schema"] is None


def test_the_registry_keeps_the_implementation_and_output_schema(acme):
    output_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    make_tool(acme, "counter", implementation="simulated", output_schema=output_schema)

    tool = Tool.objects.get(tool_id="counter")
    assert tool.implementation == "simulated"
    assert tool.as_definition()["output_schema"] == output_schema

    tool_upsert(workspace=acme, definition=tool_definition("counter", implementation="record"))
    tool.refresh_from_db()
    assert (tool.implementation, tool.output_schema) == ("record", None)


def test_an_unknown_implementation_is_refused_listing_the_built_ins(acme):
    with pytest.raises(DefinitionInvalid) as caught:
        make_tool(acme, implementation="shell")
    assert [str(p) for p in caught.value.problems] == [
        "implementation: must name a built-in implementation: http_request, json_extract, "
        "record, simulated or template_render; or null for a tool with none (got 'shell')"
    ]
    assert not Tool.objects.exists()


def test_a_simulated_tool_needs_an_output_schema():
    assert problems(tool_definition(implementation="simulated")) == [
        "output_schema: is required for a simulated tool: the JSON Schema of the result it "
        "returns (got None)"
    ]


def test_an_output_schema_must_be_an_object():
    assert problems(tool_definition(output_schema=["string"])) == [
        "output_schema: must be an object or null, not a list"
    ]


def test_an_entity_defining_a_tool_inline_is_checked_the_same_way(acme):
    from tests.factories import definition

    tool = tool_definition("inline", implementation="nope")
    with pytest.raises(DefinitionInvalid) as caught:
        entities_import(workspace=acme, definitions=[definition("a", tools=[tool])])
    (problem,) = caught.value.problems
    assert problem.path == "capabilities.tools[0].implementation"


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_each_built_ins_default_definition_is_a_valid_registry_tool(acme, name):
    default = BUILTINS[name].definition
    assert problems(default) == []
    assert default["implementation"] == name
    assert default["function_schema"]["parameters"]["type"] == "object"
    assert default["permissions"] in {"READ", "WRITE", "EXECUTE"}
    tool = tool_upsert(workspace=acme, definition=default)
    assert {k: v for k, v in tool.as_definition().items() if k in default} == default


def test_the_permissions_of_the_built_ins():
    assert {name: b.definition["permissions"] for name, b in BUILTINS.items()} == {
        "http_request": "EXECUTE",
        "json_extract": "READ",
        "record": "WRITE",
        "simulated": "READ",
        "template_render": "READ",
    }


# The admin


def test_the_admin_shows_and_saves_the_implementation_and_output_schema(client, alice, acme):
    tool = make_tool(acme)
    client.force_login(alice)
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    page = client.get(url)
    assert b'name="implementation"' in page.content
    assert b'<option value="template_render">' in page.content
    assert b'name="output_schema"' in page.content

    data = form_data(page.content, "tool_form")
    data.update(implementation="simulated", output_schema='{"type": "object"}')
    response = client.post(url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    tool.refresh_from_db()
    assert (tool.implementation, tool.output_schema) == ("simulated", {"type": "object"})


def test_the_admin_refuses_a_simulated_tool_without_an_output_schema(client, alice, acme):
    tool = make_tool(acme)
    client.force_login(alice)
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    data = form_data(client.get(url).content, "tool_form")
    data.update(implementation="simulated", output_schema="")
    response = client.post(url, data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["output_schema"]
    assert errors[0].startswith("is required for a simulated tool")
    tool.refresh_from_db()
    assert tool.implementation is None


def test_the_admin_lists_the_implementation(client, alice, acme):
    make_tool(acme, "extractor", implementation="json_extract")
    client.force_login(alice)
    page = client.get(reverse("admin:tools_tool_changelist"))
    assert b"json_extract" in page.content


# The demo tools


def demo_actions() -> list[tuple[dict, dict]]:
    """(tool, the calling action's output schema) for each tool of the demo fixture."""
    found = []
    for entity in json.loads(FIXTURE.read_text())["entities"]:
        for tool in entity.get("capabilities", {}).get("tools", []):
            output = entity["io_contract"]["output"]["schema"]
            found.append(
                (normalize_tool(tool)[0], normalize_required(json.loads(json.dumps(output))))
            )
    return found


def test_every_demo_tool_is_simulated_with_an_output_schema():
    tools = {tool["tool_id"]: tool for tool, _ in demo_actions()}
    assert set(tools) == DEMO_TOOLS
    for tool in tools.values():
        assert tool["implementation"] == "simulated"
        assert problems(tool) == []
        Draft202012Validator.check_schema(tool["output_schema"])


@pytest.mark.parametrize(
    ("tool", "action_output"), demo_actions(), ids=lambda v: v.get("tool_id", "")
)
def test_a_demo_tool_answers_what_its_action_promises(db, tool, action_output):
    # `db`: most demo tools have a rate limit, counted in the database without REDIS_URL.
    arguments = synthesize(tool["function_schema"]["parameters"], seed="demo")
    result = RegistryToolRunner().invoke(invocation(tool, arguments))

    Draft202012Validator(tool["output_schema"]).validate(result.output)
    Draft202012Validator(action_output).validate(result.output)
    assert set(action_output["properties"]) <= set(result.output)
