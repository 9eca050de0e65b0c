"""dynamic_planning.constraints a program can check (required, forbidden, order of the
entity's own tools and children) refuse a proposed plan that breaks them, naming the
constraint; any other sentence stays in the prompt only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runs.engine.constraints import broken, rules
from runs.engine.planning import CHILD, PlanRejected, parse_dynamic_plan
from runs.engine.ports import ModelReply

TOOLS = ["search", "render"]
CHILDREN = {"c1": "Analyst", "c2": "Writer"}


def kinds(sentences: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    return [(rule.kind, rule.names) for rule in rules(sentences, TOOLS, CHILDREN)]


@pytest.mark.parametrize(
    ("sentence", "rule"),
    [
        ("use search", ("required", ("tool:search",))),
        ("Must call the tool `search`.", ("required", ("tool:search",))),
        ("always include Writer", ("required", ("entity:c2",))),
        ("never use render", ("forbidden", ("tool:render",))),
        ("Do not call the tool 'render'", ("forbidden", ("tool:render",))),
        ("must not invoke c1", ("forbidden", ("entity:c1",))),
        ("Analyst before Writer", ("order", ("entity:c1", "entity:c2"))),
        ("search must come before the child writer.", ("order", ("tool:search", "entity:c2"))),
    ],
)
def test_the_three_shapes_are_read(sentence, rule):
    assert kinds([sentence]) == [rule]


@pytest.mark.parametrize(
    "sentence",
    [
        "use markdown",  # names nothing of the entity's
        "Review before publishing",
        "Keep it under 60 seconds",
        "use search and render",  # not one of the shapes: for the model
        "never use " + "x" * 600,
        "",
        None,
        42,
    ],
)
def test_other_sentences_are_for_the_model_alone(sentence: Any):
    assert kinds([sentence]) == []


def plan(*targets: str) -> list[dict]:
    return [
        {"target_entity": t.removeprefix("entity:")} if t.startswith("entity:") else {"tool_id": t}
        for t in targets
    ]


def test_a_plan_is_checked_against_each_rule():
    found = rules(["use search", "never use render", "Analyst before Writer"], TOOLS, CHILDREN)
    assert broken(found, plan("entity:c1", "search", "entity:c2")) == []
    assert broken(found, plan("entity:c2", "entity:c1", "render")) == [
        'the constraint "use search" is not kept: no step does it',
        'the constraint "never use render" is broken by step 3',
        'the constraint "Analyst before Writer" is broken: step 1 comes before step 2',
    ]
    assert broken(found, plan("search", "entity:c2")) == [
        'the constraint "Analyst before Writer" is not kept: nothing comes first'
    ]


NAMES = {"c1": "Analyst", "c2": "Writer"}


def planner(*constraints: str) -> dict[str, Any]:
    """An agent with two children and two tools that plans dynamically under `constraints`."""
    return {
        "hierarchy": {"children": [{"child_id": "c1"}, {"child_id": "c2"}]},
        "planning": {
            "static_plan": {"enabled": False, "steps": []},
            "dynamic_planning": {
                "enabled": True,
                "constraints": list(constraints),
                "allowed_deviations": {"can_change_tools": True},
            },
        },
        "capabilities": {
            "tools": [
                {"tool_id": tool, "function_schema": {"name": tool, "parameters": {}}}
                for tool in TOOLS
            ]
        },
    }


def reply(steps: list[dict]) -> ModelReply:
    return ModelReply(
        content="",
        prompt_tokens=10,
        completion_tokens=10,
        cost_usd=Decimal(0),
        latency_ms=1,
        provider="local",
        model="offline",
        parsed={"steps": steps},
    )


def test_the_models_plan_is_refused_naming_the_constraint():
    d = planner("never use search", "Keep it short")
    refused = parse_dynamic_plan(
        reply([{"target": f"{CHILD}:Writer"}, {"target": "TOOL_CALL:search"}]), d, NAMES
    )
    assert isinstance(refused, PlanRejected)
    assert refused.message == (
        'the dynamic plan breaks its constraints: the constraint "never use search" is '
        "broken by step 2"
    )
    kept = parse_dynamic_plan(reply([{"target": f"{CHILD}:Writer"}]), d, NAMES)
    assert not isinstance(kept, PlanRejected)
