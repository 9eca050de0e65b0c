"""The editor's Tools section: tools picked from the workspace's registry and the built-ins,
each with its parameters and permission; tools defined in the definition kept as they are.

POST data is what a browser would send for the rendered page (`page_form`)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from designer.editor.tools import PICKER_LIMIT
from entities.models import Entity
from tests.factories import EntityFactory, make_tool, tool_definition
from tests.support.clients import signed_in
from tests.support.page_form import form_data
from tools.selectors import tool_ids_of

pytestmark = pytest.mark.django_db


def url(entity: Entity, name: str = "entity") -> str:
    return reverse(f"designer:{name}", kwargs={"workspace": entity.workspace.slug, "pk": entity.pk})


def shown(client: Client, address: str) -> dict:
    response = client.get(address)
    assert response.status_code == 200
    return form_data(response.content, "editor")


def picked(data: dict) -> list[str]:
    value = data.get("tools-use", [])
    return [value] if isinstance(value, str) else list(value)


@pytest.fixture
def designer(alice):
    return signed_in(Client, alice)


@pytest.fixture
def agent(acme):
    make_tool(
        acme,
        "lookup",
        description="Finds a <b>customer</b>",
        permissions="WRITE",
        function_schema={
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {
                    "email": {"type": "string", "description": "Their address"},
                    "limit": {"type": ["integer", "null"]},
                },
                "required": ["email"],
            },
        },
    )
    return EntityFactory(
        workspace=acme,
        name="writer",
        type="AGENT",
        identity={"name": "writer", "persona": {"system_prompt": "You write scripts."}},
    )


def test_it_lists_the_registrys_and_the_built_in_tools_with_parameters_and_permission(
    designer, agent
):
    response = designer.get(url(agent))
    body = response.content.decode()
    picker = body[body.index('id="tool-picker"') :]
    assert 'value="lookup"' in picker
    for builtin in ("http_request", "json_extract", "record", "simulated", "template_render"):
        assert f'value="{builtin}"' in picker, builtin
    lookup = picker[picker.index('value="lookup"') : picker.index('value="http_request"')]
    assert "This workspace" in lookup
    assert "Writes (changes data)" in lookup
    assert '<code>email</code> <span class="muted">string, required</span>: Their address' in (
        lookup
    )
    assert "integer or null" in lookup
    # The registry's words are escaped.
    assert "Finds a &lt;b&gt;customer&lt;/b&gt;" in lookup
    record = picker[picker.index('value="record"') :]
    assert "Built-in" in record[:600]
    assert picked(form_data(body, "editor")) == []


def test_a_built_in_and_a_registry_tool_are_picked_and_saved_as_references(designer, agent):
    data = shown(designer, url(agent)) | {"tools-use": ["lookup", "record"], "op": "save"}
    response = designer.post(url(agent), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert agent.capabilities["tools"] == [{"tool_id": "lookup"}, {"tool_id": "record"}]
    # A built-in is usable by name: the registry is left as it was, and the version holds
    # the built-in's own definition in full.
    assert "record" not in tool_ids_of(workspace=agent.workspace)
    snapshot = agent.versions.first().definition["capabilities"]["tools"]
    assert snapshot[1]["tool_id"] == "record" and snapshot[1]["implementation"] == "record"
    data = shown(designer, url(agent))
    assert picked(data) == ["lookup", "record"]
    # Saved again unchanged: the same references, nothing new.
    assert designer.post(url(agent), data | {"op": "save"}).status_code == 302
    agent.refresh_from_db()
    assert agent.capabilities["tools"] == [{"tool_id": "lookup"}, {"tool_id": "record"}]
    # Unticked: gone.
    data = shown(designer, url(agent)) | {"tools-use": ["record"], "op": "save"}
    assert designer.post(url(agent), data).status_code == 302
    agent.refresh_from_db()
    assert agent.capabilities["tools"] == [{"tool_id": "record"}]


def test_the_json_view_shows_the_picked_tools(designer, agent):
    data = shown(designer, url(agent)) | {"tools-use": ["lookup", "simulated"]}
    response = designer.post(url(agent, "entity_json"), data)
    raw = form_data(b'<form id="f">' + response.content + b"</form>", "f")["raw"]
    tools = json.loads(raw)["capabilities"]["tools"]
    assert tools[0] == {"tool_id": "lookup"}
    assert tools[1] == {"tool_id": "simulated"}  # a built-in, by name


def test_a_tool_defined_in_the_definition_is_kept_as_it_is(designer, agent):
    data = shown(designer, url(agent))
    document = json.loads(data["document"])
    own = tool_definition("shout", description="Says it loud")
    changed = tool_definition("lookup", description="My own lookup")
    document["capabilities"]["tools"] = [own, {"tool_id": "record"}, changed]
    response = designer.post(url(agent), data | {"raw": json.dumps(document), "op": "fields"})
    assert response.status_code == 200
    body = response.content.decode()
    kept = body[body.index("Defined in this definition") :]
    assert "<code>shout</code>" in kept
    assert "<code>lookup</code>" in kept
    assert "Differs from the registry" in kept
    assert "Edited in the JSON view" in kept
    page = form_data(body, "editor")
    # The reference to a built-in is a pick; the tools defined here are not offered to tick.
    assert picked(page) == ["record"]
    picker = body[body.index('id="tool-picker"') : body.index("Defined in this definition")]
    assert 'value="lookup"' not in picker
    page |= {"tools-use": ["record", "template_render"], "op": "save"}
    response = designer.post(url(agent), page)
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert [t["tool_id"] for t in agent.capabilities["tools"]] == [
        "shout",
        "record",
        "lookup",
        "template_render",
    ]


def _with_tools(designer: Client, agent: Entity, tools: list) -> dict:
    """The page after these tools were put into the fields from the JSON view."""
    data = shown(designer, url(agent))
    document = json.loads(data["document"])
    document["capabilities"]["tools"] = tools
    response = designer.post(url(agent), data | {"raw": json.dumps(document), "op": "fields"})
    return form_data(response.content, "editor")


def _tool_problems(body: str) -> str:
    slot = body[body.index('id="err-tools"') :]
    return slot[: slot.index("</ul>")]


def test_a_problem_of_a_kept_tool_is_shown_naming_it_and_nothing_is_lost(designer, agent):
    page = _with_tools(designer, agent, [{"tool_id": "nowhere"}])
    page |= {"tools-use": ["lookup"], "identity-display_name": "Kept"}
    response = designer.post(url(agent, "entity_check"), page)
    problems = _tool_problems(response.content.decode())
    assert "nowhere: there is no tool &#x27;nowhere&#x27; in this workspace" in problems
    response = designer.post(url(agent), page | {"op": "save"})
    assert response.status_code == 422
    again = form_data(response.content, "editor")
    assert picked(again) == ["lookup"]
    assert again["identity-display_name"] == "Kept"
    assert json.loads(again["document"])["capabilities"]["tools"] == [{"tool_id": "nowhere"}]
    # A tool defined here without its name: named by its id, after the picked one.
    page = _with_tools(designer, agent, [{"tool_id": "x", "provider": ""}]) | {
        "tools-use": ["lookup"]
    }
    problems = _tool_problems(designer.post(url(agent, "entity_check"), page).content.decode())
    assert "x: must not be empty" in problems
    assert "x: is required when a tool is defined here" in problems


@pytest.mark.parametrize(
    ("tool_id", "says"),
    [
        ("made_up", "No tool &#x27;made_up&#x27;"),
        ("theirs", "No tool &#x27;theirs&#x27;"),
        ("a\x00b", "is not one a tool can have"),
        ("x" * 101, "is not one a tool can have"),
    ],
)
def test_a_forged_pick_is_refused_at_the_field(designer, agent, globex, tool_id, says):
    make_tool(globex, "theirs")
    data = shown(designer, url(agent)) | {"tools-use": ["lookup", tool_id], "op": "save"}
    response = designer.post(url(agent), data)
    assert response.status_code == 422
    assert says in response.content.decode()
    assert response.context["editor"].sections[2].form.errors["use"]
    agent.refresh_from_db()
    assert agent.capabilities["tools"] == []


def test_a_large_registry_lists_a_page_and_the_search_finds_the_rest(designer, agent, acme):
    for number in range(PICKER_LIMIT + 20):
        make_tool(acme, f"t{number:03d}", description=f"Tool number {number}")
    data = shown(designer, url(agent)) | {"tools-use": ["t110"], "op": "save"}
    assert designer.post(url(agent), data).status_code == 302
    response = designer.get(url(agent))
    body = response.content.decode()
    assert body.count('name="tools-use"') == PICKER_LIMIT + 1  # the pick, then a page
    assert "search to find the others" in body
    assert picked(form_data(body, "editor")) == ["t110"]
    search = reverse("designer:tool_picker", kwargs={"workspace": "acme"})
    found = designer.get(search, {"tool_search": "number 11", "tools-use": ["t003"]})
    assert found.status_code == 200
    text = found.content.decode()
    # The ticked one stays on top, checked; then the matches (t011, t110..t119).
    assert text.index('value="t003" checked') < text.index('value="t011"')
    assert 'value="t119"' in text
    assert 'value="t020"' not in text
    nothing = designer.get(search, {"tool_search": "<zzz>"}).content.decode()
    assert "No tool matches “&lt;zzz&gt;”" in nothing


def test_the_search_is_scoped_and_refuses_a_nul(designer, charlie, agent):
    search = reverse("designer:tool_picker", kwargs={"workspace": "acme"})
    assert designer.get(search, {"tool_search": "a\x00"}).status_code == 400
    outsider = signed_in(Client, charlie)
    assert outsider.get(search).status_code == 404
    # Their own workspace's search does not offer acme's tools.
    theirs = outsider.get(reverse("designer:tool_picker", kwargs={"workspace": "globex"}))
    assert 'value="lookup"' not in theirs.content.decode()
    assert 'value="record"' in theirs.content.decode()
