"""`usable_tools`: what an entity of a workspace can pick, the registry's tools and the
built-ins it does not override, searched and limited."""

from __future__ import annotations

import pytest

from tests.factories import make_tool
from tools.builtin import BUILTINS
from tools.selectors import usable_tool_count, usable_tools

pytestmark = pytest.mark.django_db


def test_it_lists_the_registry_then_the_built_ins(acme, globex):
    make_tool(acme, "lookup")
    make_tool(globex, "theirs")
    found = usable_tools(workspace=acme)
    assert [t.tool_id for t in found] == ["lookup", *sorted(BUILTINS)]
    assert found[0].in_registry and not found[0].builtin
    assert not found[1].in_registry and found[1].builtin
    assert usable_tool_count(workspace=acme) == 1 + len(BUILTINS)


def test_a_registry_tool_overrides_the_built_in_of_its_id(acme):
    make_tool(acme, "record", description="Our own record", implementation="record")
    found = [t for t in usable_tools(workspace=acme) if t.tool_id == "record"]
    assert len(found) == 1
    assert found[0].in_registry
    assert found[0].definition["description"] == "Our own record"
    assert usable_tool_count(workspace=acme) == len(BUILTINS)


def test_it_searches_limits_and_picks_by_id(acme):
    make_tool(acme, "lookup", description="Finds a customer")
    assert [t.tool_id for t in usable_tools(workspace=acme, search="CUSTOMER")] == ["lookup"]
    assert [t.tool_id for t in usable_tools(workspace=acme, search="row of data")] == ["record"]
    assert len(usable_tools(workspace=acme, limit=2)) == 2
    ids = ["simulated", "lookup", "nowhere"]
    assert [t.tool_id for t in usable_tools(workspace=acme, tool_ids=ids)] == [
        "lookup",
        "simulated",
    ]


def test_a_built_in_is_usable_by_name_in_any_workspace(acme):
    """A definition names a built-in tool the workspace's registry does not hold: it saves,
    and a run calls the built-in."""
    from tests.factories import EntityFactory
    from tests.support.runs import Driver, static_plan, step
    from tools.models import Tool

    plan_step = step(1, "Render", "TOOL_CALL", tool_id="template_render")
    plan_step["input_mapping"] = {"template": "Hello {{ name }}", "variables": {"name": "Ada"}}
    entity = EntityFactory(
        workspace=acme,
        name="greeter",
        tools=[{"tool_id": "template_render"}],
        planning=static_plan(plan_step),
    )
    assert not Tool.objects.filter(workspace=acme).exists()
    run = Driver().run(entity, {})
    assert run.status == "COMPLETED", run.error_message
