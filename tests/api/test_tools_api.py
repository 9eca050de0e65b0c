"""The tools API: the registries of the user's workspaces, filtered, and one tool with its
schemas and authentication, which names the vault secret it uses but never shows a secret."""

from __future__ import annotations

import json

import pytest

from governance.vault import secret_set
from tests.api.checks import error_of
from tests.factories import WorkspaceFactory, grant, make_tool
from tools.models import Tool

pytestmark = pytest.mark.smoke

LIST = "/api/v1/tools"
PLANTED = "sk-planted-9f8e7d6c5b4a"


def detail(tool: Tool) -> str:
    return f"/api/v1/tools/{tool.pk}"


def tool_ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["tool_id"] for item in response.json()["results"]]


@pytest.fixture
def tools(acme) -> dict[str, Tool]:
    return {
        "echo": make_tool(acme, "echo"),
        "publish": make_tool(
            acme,
            "publish",
            description="Posts to the news channel",
            permissions="WRITE",
            provider="social",
        ),
        "deploy": make_tool(acme, "deploy", permissions="EXECUTE", sandbox_mode=True),
    }


@pytest.fixture
def search_api(acme) -> Tool:
    secret_set(workspace=acme, name="search_key", value=PLANTED, kind="API_KEY")
    return make_tool(
        acme,
        "web_search",
        provider="search",
        authentication={"type": "API_KEY", "credentials_ref": "search_key"},
        output_schema={"type": "object", "properties": {"hits": {"type": "array"}}},
        rate_limit={"calls_per_minute": 30},
    )


@pytest.fixture
def globex_tool(globex) -> Tool:
    return make_tool(globex, "echo")


def test_the_list_shows_the_tools_of_the_users_workspaces_only(
    api, bob, charlie, tools, globex_tool
):
    api.force_login(bob)
    assert tool_ids(api.get(LIST)) == ["deploy", "echo", "publish"]
    api.force_login(charlie)
    assert tool_ids(api.get(LIST)) == ["echo"]
    assert api.get(LIST).json()["results"][0]["id"] == globex_tool.pk


def test_the_list_says_what_each_tool_is(api, bob, acme, tools):
    api.force_login(bob)

    item = api.get(LIST).json()["results"][2]

    assert item == {
        "id": tools["publish"].pk,
        "url": detail(tools["publish"]),
        "workspace": {"id": acme.pk, "slug": "acme", "name": "Acme"},
        "tool_id": "publish",
        "name": "Publish",
        "description": "Posts to the news channel",
        "provider": "social",
        "permissions": "WRITE",
        "sandbox_mode": False,
        "implementation": None,
        "created_at": item["created_at"],
        "updated_at": item["updated_at"],
    }


def test_the_list_filters_by_workspace_permission_provider_and_words(api, alice, acme, tools):
    other = WorkspaceFactory(name="Initech", slug="initech")
    grant(alice, other, "viewer")
    make_tool(other, "echo")
    api.force_login(alice)

    assert tool_ids(api.get(LIST)) == ["deploy", "echo", "echo", "publish"]
    assert tool_ids(api.get(LIST, {"workspace": "acme"})) == ["deploy", "echo", "publish"]
    assert tool_ids(api.get(LIST, {"workspace": str(other.pk)})) == ["echo"]
    assert tool_ids(api.get(LIST, {"permission": "write,execute"})) == ["deploy", "publish"]
    assert tool_ids(api.get(LIST, {"provider": "social"})) == ["publish"]
    assert tool_ids(api.get(LIST, {"q": "NEWS"})) == ["publish"]
    assert tool_ids(api.get(LIST, {"workspace": "acme", "provider": "nobody"})) == []


def test_bad_filters_are_refused_with_a_clear_message(api, alice, globex, tools):
    api.force_login(alice)

    body = error_of(
        api.get(LIST, {"permission": "ADMIN", "workspace": "globex", "kind": "x"}),
        400,
        "VALIDATION_ERROR",
    )
    # Once the query is well formed, a workspace not among yours is not found.
    theirs = error_of(api.get(LIST, {"workspace": "globex"}), 404, "NOT_FOUND")

    assert body["error"]["details"] == {
        "kind": "unknown field; this takes permission, provider, q, workspace",
        "permission": "ADMIN is not a permission; use READ, WRITE, EXECUTE",
    }
    assert theirs["error"]["details"] == {"workspace": 'no workspace "globex" among yours'}


def test_the_list_comes_in_pages(api, alice, tools):
    api.force_login(alice)

    first = api.get(LIST, {"page_size": 2}).json()
    second = api.get(LIST, {"page_size": 2, "page": 2}).json()

    assert [t["tool_id"] for t in first["results"] + second["results"]] == [
        "deploy",
        "echo",
        "publish",
    ]
    error_of(api.get(LIST, {"page_size": 2, "page": 3}), 404, "NOT_FOUND")
    error_of(api.get(LIST, {"page_size": "lots"}), 400, "VALIDATION_ERROR")


def test_the_detail_shows_the_schemas_and_names_the_secret_without_showing_it(
    api, bob, acme, search_api
):
    api.force_login(bob)

    response = api.get(detail(search_api))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["tool_id"] == "web_search" and body["provider"] == "search"
    assert body["authentication"] == {"type": "API_KEY", "credentials_ref": "search_key"}
    assert body["function_schema"]["name"] == "web_search"
    assert body["output_schema"] == {"type": "object", "properties": {"hits": {"type": "array"}}}
    assert body["rate_limit"] == {"calls_per_minute": 30, "calls_per_hour": None}
    assert PLANTED not in response.content.decode()
    assert PLANTED not in json.dumps(api.get(LIST).json())


def test_a_tool_without_authentication_says_none(api, bob, tools):
    api.force_login(bob)

    body = api.get(detail(tools["echo"])).json()

    assert body["authentication"] == {"type": "NONE", "credentials_ref": None}


def test_a_tool_of_another_workspace_is_not_found(api, alice, globex_tool):
    api.force_login(alice)

    theirs = error_of(api.get(detail(globex_tool)), 404, "NOT_FOUND")
    nowhere = error_of(api.get("/api/v1/tools/999999"), 404, "NOT_FOUND")

    # The same answer whether it is another workspace's or nobody's: only the id differs.
    assert theirs["error"]["message"] == f"no tool {globex_tool.pk} in your workspaces"
    assert nowhere["error"]["message"] == "no tool 999999 in your workspaces"


def test_the_tools_api_is_read_only_and_needs_a_sign_in(api, alice, tools):
    error_of(api.get(LIST), 401, "NOT_AUTHENTICATED")
    api.force_login(alice)

    error_of(api.post(LIST, {"tool_id": "new"}), 405, "METHOD_NOT_ALLOWED")
    error_of(api.delete(detail(tools["echo"])), 405, "METHOD_NOT_ALLOWED")
    assert Tool.objects.count() == 3
