"""Design-time validation (seed 000 §9.1): every rule and every bad input of issue 2.

Each refusal is checked three ways: the problem's field path, a message that names the
problem, and that nothing at all was written (`refused` compares the whole workspace before
and after).
"""

from __future__ import annotations

from typing import Any

import pytest

from entities.definition import DefinitionInvalid, Problem
from entities.exchange import definition_of, export_workspace
from entities.models import (
    ChildLink,
    Entity,
    EntityStatusChange,
    EntityVersion,
    PlanStep,
    Workspace,
)
from entities.services import entities_import, entity_save
from tests.factories import EntityFactory, definition, make_tool
from tools.models import Tool

pytestmark = [pytest.mark.smoke]


def stored(workspace: Workspace) -> dict[str, Any]:
    """Everything a save could write, so a refused save can be shown to have written nothing."""
    return {
        "entities": Entity.objects.count(),
        "links": ChildLink.objects.count(),
        "steps": PlanStep.objects.count(),
        "versions": EntityVersion.objects.count(),
        "status_changes": EntityStatusChange.objects.count(),
        "tools": Tool.objects.count(),
        "export": export_workspace(workspace),
    }


def refused(workspace: Workspace, raw: Any, entity: Entity | None = None) -> list[Problem]:
    """Save `raw`, expect a refusal, check that nothing changed, and return the problems."""
    before = stored(workspace)
    with pytest.raises(DefinitionInvalid) as refusal:
        entity_save(workspace=workspace, definition=raw, entity=entity)
    assert stored(workspace) == before
    return refusal.value.problems


def at(problems: list[Problem], path: str) -> str:
    """The one message at `path` (fails when there is none or several)."""
    messages = [p.message for p in problems if p.path == path]
    assert len(messages) == 1, f"expected one problem at {path!r}, got {problems}"
    return messages[0]


def step(order: int, type: str, **target: Any) -> dict:  # noqa: A002
    return {
        "step_id": f"s{order}",
        "order": order,
        "name": f"step {order}",
        "type": type,
        "target": target,
    }


def plan(*steps: dict) -> dict:
    return {"static_plan": {"enabled": True, "steps": list(steps)}}


@pytest.fixture
def chain(acme):
    """top (PROCESS, max depth 3) → a (AGENT) → b (SKILL) → c (ACTION): three levels."""
    c = EntityFactory(workspace=acme, name="c", type="ACTION")
    b = EntityFactory(workspace=acme, name="b", type="SKILL", children=[c])
    a = EntityFactory(workspace=acme, name="a", type="AGENT", children=[b])
    top = EntityFactory(workspace=acme, name="top", type="PROCESS", children=[a], max_depth=3)
    return top, a, b, c


# Cycles and self-reference


def test_it_refuses_a_cycle_of_two(acme):
    # Two of one level: across levels the type rule refuses the link before any cycle.
    b = EntityFactory(workspace=acme, name="b", type="SKILL")
    EntityFactory(workspace=acme, name="a", type="SKILL", children=[b])

    problems = refused(acme, definition("b", "SKILL", children=["a"]), entity=b)

    message = at(problems, "hierarchy.children[0].child_id")
    assert "creates a cycle: b → a → b" in message
    assert len(problems) == 1


def test_it_refuses_a_cycle_of_three_made_by_the_last_save(acme):
    c = EntityFactory(workspace=acme, name="c", type="AGENT")
    b = EntityFactory(workspace=acme, name="b", type="AGENT", children=[c])
    EntityFactory(workspace=acme, name="a", type="AGENT", children=[b])

    problems = refused(acme, definition("c", "AGENT", children=["a"]), entity=c)

    assert "creates a cycle: c → a → b → c" in at(problems, "hierarchy.children[0].child_id")


def test_a_cycle_across_levels_is_told_with_the_type_rule(acme, chain):
    top, a, b, c = chain

    problems = refused(acme, definition("c", "ACTION", children=["a"]), entity=c)

    messages = [p.message for p in problems if p.path == "hierarchy.children[0].child_id"]
    assert messages == [
        "“a” cannot be a child of the ACTION “c”: an action is the smallest "
        "unit and has no children",
        "creates a cycle: c → a → b → c; an entity cannot be its own ancestor",
    ]


def test_it_refuses_a_cycle_between_two_entities_of_one_bundle(acme):
    before = stored(acme)
    with pytest.raises(DefinitionInvalid) as refusal:
        entities_import(
            workspace=acme,
            definitions=[
                definition("ping", "SKILL", children=["pong"]),
                definition("pong", "SKILL", children=["ping"]),
            ],
        )
    assert stored(acme) == before
    cycles = [p for p in refusal.value.problems if "creates a cycle" in p.message]
    assert {p.entity for p in cycles} == {"entities[0] (ping)", "entities[1] (pong)"}
    assert {p.path for p in cycles} == {"hierarchy.children[0].child_id"}


def test_it_refuses_an_entity_as_its_own_child(acme):
    a = EntityFactory(workspace=acme, name="a", type="SKILL")

    problems = refused(acme, definition("a", "SKILL", children=["a"]), entity=a)

    assert at(problems, "hierarchy.children[0].child_id") == "an entity cannot be its own child"


def test_it_refuses_a_new_entity_naming_itself_as_its_child(acme):
    problems = refused(acme, definition("loop", "SKILL", children=["loop"]))

    assert "its own child" in at(problems, "hierarchy.children[0].child_id")


# References: children, tools, plan targets


def test_it_refuses_a_missing_child(acme):
    EntityFactory(workspace=acme, name="known")

    problems = refused(acme, definition("p", "SKILL", children=["known", "ghost"]))

    assert "no entity 'ghost' in this workspace" in at(problems, "hierarchy.children[1].child_id")
    assert len(problems) == 1


def test_it_refuses_a_child_of_another_workspace(acme, globex):
    EntityFactory(workspace=globex, name="elsewhere")

    problems = refused(acme, definition("p", "SKILL", children=["elsewhere"]))

    assert "no entity 'elsewhere'" in at(problems, "hierarchy.children[0].child_id")


def test_it_refuses_a_reference_to_an_unknown_tool(acme):
    make_tool(acme, "echo")

    problems = refused(acme, definition("t", tools=[{"tool_id": "echo"}, {"tool_id": "nope"}]))

    message = at(problems, "capabilities.tools[1].tool_id")
    assert "no tool 'nope'" in message
    assert "tool registry" in message
    assert len(problems) == 1


def test_it_accepts_a_reference_to_a_tool_of_the_registry(acme):
    make_tool(acme, "echo")

    result = entity_save(workspace=acme, definition=definition("t", tools=[{"tool_id": "echo"}]))

    assert result.entity.capabilities["tools"] == [{"tool_id": "echo"}]


def test_it_refuses_a_tool_call_step_naming_a_tool_not_in_capabilities(acme):
    make_tool(acme, "echo")
    make_tool(acme, "search")  # in the registry, but not among this entity's tools

    problems = refused(
        acme,
        definition(
            "t", tools=[{"tool_id": "echo"}], planning=plan(step(1, "TOOL_CALL", tool_id="search"))
        ),
    )

    message = at(problems, "planning.static_plan.steps[0].target.tool_id")
    assert "'search' is not in this entity's capabilities.tools" in message


def test_it_refuses_a_step_target_that_is_not_a_child(acme):
    EntityFactory(workspace=acme, name="child")
    EntityFactory(workspace=acme, name="stranger")

    problems = refused(
        acme,
        definition(
            "p",
            "SKILL",
            children=["child"],
            planning=plan(
                step(1, "CHILD_ENTITY_INVOCATION", entity_id="child"),
                step(2, "CHILD_ENTITY_INVOCATION", entity_id="stranger"),
            ),
        ),
    )

    message = at(problems, "planning.static_plan.steps[1].target.entity_id")
    assert "'stranger' is not a child of this entity" in message
    assert len(problems) == 1


def test_it_refuses_a_step_target_that_does_not_exist(acme):
    problems = refused(
        acme,
        definition("p", "SKILL", planning=plan(step(1, "CHILD_ENTITY_INVOCATION", entity_id="nb"))),
    )

    assert "no entity 'nb'" in at(problems, "planning.static_plan.steps[0].target.entity_id")


# Depth


def test_it_accepts_nesting_exactly_at_max_recursion_depth(acme, chain):
    top, *_ = chain

    assert Entity.objects.get(pk=top.pk).composition_depth == 0
    assert Entity.objects.get(name="c").composition_depth == 3


def test_it_refuses_nesting_deeper_than_max_recursion_depth(acme, chain):
    problems = refused(acme, definition("shallow", "PROCESS", children=["a"], max_depth=1))

    message = at(problems, "hierarchy.children")
    assert "nests 3 levels deep (shallow → a → b → c)" in message
    assert "max_recursion_depth of 1" in message


def test_it_refuses_a_link_below_that_makes_an_ancestor_too_deep(acme, chain):
    top, a, b, c = chain
    EntityFactory(workspace=acme, name="d")

    problems = refused(acme, definition("c", "ACTION", children=["d"]), entity=c)

    message = at(problems, "hierarchy.children")
    assert "makes 'top' nest 4 levels deep (top → a → b → c → d)" in message
    assert "max_recursion_depth of 3" in message


# Budgets


def test_it_accepts_child_budgets_that_add_up_to_the_parents_exactly(acme):
    x = EntityFactory(workspace=acme, name="x", max_cost=0.1)
    y = EntityFactory(workspace=acme, name="y", max_cost=0.2)

    parent = EntityFactory(workspace=acme, name="p", type="SKILL", children=[x, y], max_cost=0.3)

    assert parent.child_links.count() == 2


def test_it_refuses_child_budgets_over_the_parents(acme):
    EntityFactory(workspace=acme, name="x", max_cost=1.0)
    EntityFactory(workspace=acme, name="y", max_cost=1.0)
    EntityFactory(workspace=acme, name="free")  # no budget of its own: not counted

    problems = refused(acme, definition("p", "SKILL", children=["x", "y", "free"], max_cost=1.5))

    message = at(problems, "governance.cost_controls.max_cost_usd")
    assert "add up to $2 (x $1, y $1)" in message
    assert "max_cost_usd of $1.5" in message


def test_it_refuses_raising_a_childs_budget_over_its_parents(acme):
    x = EntityFactory(workspace=acme, name="x", max_cost=1.0)
    y = EntityFactory(workspace=acme, name="y", max_cost=1.0)
    EntityFactory(workspace=acme, name="p", type="SKILL", children=[x, y], max_cost=2.5)

    problems = refused(acme, definition("x", max_cost=2.0), entity=x)

    message = at(problems, "governance.cost_controls.max_cost_usd")
    assert "the children of 'p' add up to $3 (x $2, y $1)" in message
    assert "max_cost_usd of $2.5" in message


# The shape of a definition


def test_it_refuses_an_unknown_enum_value(acme):
    problems = refused(
        acme,
        definition(
            "e",
            "WIDGET",
            children=[{"child_id": "x", "relationship": "SOMETIMES"}],
        ),
    )

    assert at(problems, "metadata.type") == (
        "'WIDGET' is not allowed; use one of: ACTION, SKILL, AGENT, PROCESS"
    )
    assert "'SOMETIMES' is not allowed" in at(problems, "hierarchy.children[0].relationship")


@pytest.mark.parametrize("value", [[], "yes", 3])
def test_it_refuses_a_section_that_is_not_an_object(acme, value):
    problems = refused(acme, definition("s", planning=value))

    assert at(problems, "planning").startswith("must be an object (a section)")


def test_it_refuses_a_definition_that_is_not_an_object(acme):
    problems = refused(acme, ["metadata", "identity"])

    assert "must be a JSON object" in at(problems, "")


def test_it_refuses_an_unknown_field_with_a_did_you_mean_hint(acme):
    raw = definition("u")
    raw["identity"]["descripton"] = "typo"
    raw["planing"] = {}

    problems = refused(acme, raw)

    assert at(problems, "identity.descripton") == (
        "is not a known field; did you mean 'description'?"
    )
    assert "did you mean 'planning'?" in at(problems, "planing")


def test_it_refuses_a_duplicate_name_in_one_workspace(acme):
    EntityFactory(workspace=acme, name="dup")

    problems = refused(acme, definition("dup", "SKILL"))

    message = at(problems, "identity.name")
    assert "already named 'dup'" in message
    assert "unique within a workspace" in message


def test_it_allows_the_same_name_in_another_workspace(acme, globex):
    EntityFactory(workspace=acme, name="dup")

    twin = entity_save(workspace=globex, definition=definition("dup")).entity

    assert Entity.objects.filter(name="dup").count() == 2
    assert twin.workspace == globex


def test_it_refuses_a_type_change_on_an_existing_entity(acme):
    a = EntityFactory(workspace=acme, name="a", type="SKILL")

    problems = refused(acme, definition("a", "AGENT"), entity=a)

    message = at(problems, "metadata.type")
    assert "cannot change from SKILL to AGENT" in message
    assert Entity.objects.get(pk=a.pk).type == "SKILL"


def test_it_refuses_an_exit_condition_to_a_missing_order(acme):
    first = step(1, "THOUGHT", prompt_template="think")
    first["exit_conditions"] = [
        {"condition": {">=": [{"var": "score"}, 5]}, "next_step": 2},
        {"condition": {">=": [{"var": "score"}, 9]}, "next_step": 7},
        {"condition": {"==": [1, 1]}, "next_step": "END"},
    ]
    second = step(2, "THOUGHT", prompt_template="think again")

    problems = refused(acme, definition("x", planning=plan(first, second)))

    path = "planning.static_plan.steps[0].exit_conditions[1].next_step"
    assert "no step with order 7 (orders: 1, 2" in at(problems, path)
    assert len(problems) == 1


def looping(condition: Any, **loop_control: Any) -> dict:
    """Two steps, the second jumping back to the first when `condition` holds."""
    second = step(2, "THOUGHT", prompt_template="review")
    second["exit_conditions"] = [{"condition": condition, "next_step": 1}]
    planning = plan(step(1, "THOUGHT", prompt_template="draft"), second)
    planning["loop_control"] = loop_control
    return planning


def test_a_jump_back_needs_more_than_one_pass(acme):
    reads = {"<": [{"var": "iteration"}, 3]}
    problems = refused(acme, definition("x", planning=looping(reads, max_iterations=1)))

    message = at(problems, "planning.static_plan.steps[1].exit_conditions[0].next_step")
    assert "jumps back to step 1, but planning.loop_control.max_iterations is 1" in message
    assert len(problems) == 1
    # The loop's default is one pass: a definition that says nothing is refused too.
    assert refused(acme, definition("y", planning=looping(reads)))


@pytest.mark.parametrize("condition", [True, {"==": [1, 1]}, {"!": [False]}])
def test_a_jump_back_whose_condition_cannot_change_is_refused(acme, condition):
    problems = refused(acme, definition("x", planning=looping(condition, max_iterations=3)))

    message = at(problems, "planning.static_plan.steps[1].exit_conditions[0].condition")
    assert "jumps back to step 1 whatever happens" in message
    assert "on_exhausted to COMPLETE" in message


@pytest.mark.parametrize(
    ("condition", "loop_control"),
    [
        ({"<": [{"var": "iteration"}, 3]}, {"max_iterations": 3}),
        ({"!": {"var": "review.approved"}}, {"max_iterations": None}),
        ({"missing": ["review"]}, {"max_iterations": 2, "on_exhausted": "FAIL"}),
        (True, {"max_iterations": 3, "on_exhausted": "COMPLETE"}),  # "make three passes"
    ],
)
def test_a_jump_back_that_can_end_is_saved(acme, condition, loop_control):
    saved = entity_save(
        workspace=acme, definition=definition("x", planning=looping(condition, **loop_control))
    )
    assert saved.entity.pk


@pytest.mark.parametrize("backend", ["REDIS", "VECTOR_DB"])
def test_a_memory_kept_anywhere_but_the_database_is_not_supported_yet(acme, backend):
    memory = {"memory": {"enabled": True, "storage_backend": backend}}
    problems = refused(acme, definition("x", capabilities=memory))

    message = at(problems, "capabilities.memory.storage_backend")
    assert message == (
        f"{backend} is not supported yet: memory is kept in the database; use POSTGRES_JSONB"
    )


@pytest.mark.parametrize(("cap", "fold"), [(9, 10), (5, 50)])
def test_a_memory_that_drops_items_before_it_can_summarise_them_is_refused(acme, cap, fold):
    policy = {"max_items": cap, "summarization_threshold": fold}
    memory = {"memory": {"enabled": True, "retention_policy": policy}}
    problems = refused(acme, definition("x", capabilities=memory))

    message = at(problems, "capabilities.memory.retention_policy.summarization_threshold")
    assert message.startswith(f"is {fold} but max_items keeps only {cap}")


@pytest.mark.parametrize("cap", [50, 100])
def test_a_memory_that_summarises_within_its_cap_is_saved(acme, cap):
    policy = {"max_items": cap, "summarization_threshold": 50}
    memory = {"memory": {"enabled": True, "retention_policy": policy}}
    assert entity_save(workspace=acme, definition=definition("x", capabilities=memory)).entity


def test_it_refuses_a_condition_that_is_not_json(acme):
    EntityFactory(workspace=acme, name="child")
    link = {
        "child_id": "child",
        "relationship": "CONDITIONAL",
        "condition": {"enabled": True, "expression": '{"==": [{"var": "x"}, 1]'},
    }

    problems = refused(acme, definition("p", "SKILL", children=[link]))

    message = at(problems, "hierarchy.children[0].condition.expression")
    assert message.startswith("is not JSONLogic: it is not valid JSON")


def test_it_refuses_a_jsonlogic_operator_it_does_not_know(acme):
    first = step(1, "THOUGHT", prompt_template="think")
    first["exit_conditions"] = [{"condition": '{"approx": [{"var": "x"}, 1]}', "next_step": "END"}]

    problems = refused(acme, definition("x", planning=plan(first)))

    message = at(problems, "planning.static_plan.steps[0].exit_conditions[0].condition")
    assert "uses the unknown operator 'approx'" in message


def test_it_reads_a_jsonlogic_condition_written_as_text(acme):
    EntityFactory(workspace=acme, name="child")
    link = {
        "child_id": "child",
        "relationship": "CONDITIONAL",
        "condition": {"enabled": True, "expression": '{"==": [{"var": "x"}, 1]}'},
    }

    parent = EntityFactory(workspace=acme, name="p", type="SKILL", children=[link])

    stored_link = parent.child_links.get()
    assert stored_link.condition["expression"] == {"==": [{"var": "x"}, 1]}


@pytest.mark.parametrize(
    "condition",
    [{}, {"enabled": True}, {"enabled": False, "expression": {"==": [1, 1]}}],
    ids=["no condition", "enabled without expression", "expression not enabled"],
)
def test_it_refuses_a_conditional_link_without_a_condition(acme, condition):
    EntityFactory(workspace=acme, name="child")
    link = {"child_id": "child", "relationship": "CONDITIONAL", "condition": condition}

    problems = refused(acme, definition("p", "SKILL", children=[link]))

    assert "a CONDITIONAL child needs" in at(problems, "hierarchy.children[0].condition")


def test_it_refuses_semantic_search_memory(acme):
    problems = refused(
        acme,
        definition(
            "m", capabilities={"memory": {"enabled": True, "access_pattern": "SEMANTIC_SEARCH"}}
        ),
    )

    assert "SEMANTIC_SEARCH is not supported" in at(problems, "capabilities.memory.access_pattern")


@pytest.mark.parametrize("entity_type", ["AGENT", "PROCESS"])
def test_it_requires_a_system_prompt_for_an_agent_or_process(acme, entity_type):
    raw = definition("quiet", entity_type)
    raw["identity"]["persona"]["system_prompt"] = "  "

    problems = refused(acme, raw)

    message = at(problems, "identity.persona.system_prompt")
    assert f"is required for an {entity_type}" in message


def test_it_does_not_require_a_system_prompt_for_an_action(acme):
    raw = definition("quiet", "ACTION")
    raw["identity"]["persona"]["system_prompt"] = ""

    assert entity_save(workspace=acme, definition=raw).created


def test_it_refuses_an_io_contract_schema_that_is_not_json_schema(acme):
    raw = definition(
        "io",
        io_contract={
            "input": {"schema": {"type": "object", "properties": {"when": {"type": "datetime"}}}},
            "output": {"schema": {"type": "object", "required": "answer"}},
        },
    )

    problems = refused(acme, raw)

    assert "is not a valid JSON Schema" in at(
        problems, "io_contract.input.schema.properties.when.type"
    )
    assert "is not a valid JSON Schema" in at(problems, "io_contract.output.schema.required")


def test_it_refuses_an_io_contract_schema_that_is_not_an_object_schema(acme):
    problems = refused(
        acme, definition("io", io_contract={"output": {"schema": {"type": "array"}}})
    )

    assert 'must be "object"' in at(problems, "io_contract.output.schema.type")


def test_it_normalises_the_seeds_property_level_required(acme):
    schema = {
        "type": "object",
        "properties": {
            "job_description": {"type": "string", "required": True},
            "company": {
                "type": "object",
                "required": True,
                "properties": {"name": {"type": "string", "required": True}},
            },
            "audience": {"type": "string", "required": False},
        },
    }

    entity = EntityFactory(workspace=acme, name="io", io_contract={"input": {"schema": schema}})

    saved = definition_of(entity)["io_contract"]["input"]["schema"]
    assert saved["required"] == ["job_description", "company"]
    assert saved["properties"]["company"]["required"] == ["name"]
    assert saved["properties"]["audience"] == {"type": "string"}
    assert "required" not in saved["properties"]["job_description"]


# Many problems at once, and nothing saved


def test_it_reports_every_problem_of_a_definition_at_once(acme):
    raw = definition(
        "many", "AGENT", planning="later", children=[{"child_id": "x", "relationship": "OFTEN"}]
    )
    raw["identity"]["persona"]["system_prompt"] = ""
    raw["logic_gate"] = {"retry_polcy": {}}
    raw["capabilities"]["memory"] = {"enabled": True, "access_pattern": "SEMANTIC_SEARCH"}

    problems = refused(acme, raw)

    assert {p.path for p in problems} == {
        "planning",
        "hierarchy.children[0].relationship",
        "identity.persona.system_prompt",
        "logic_gate.retry_polcy",
        "capabilities.memory.access_pattern",
    }
    assert "did you mean 'retry_policy'?" in at(problems, "logic_gate.retry_polcy")


def test_it_reports_every_broken_reference_at_once(acme):
    EntityFactory(workspace=acme, name="other")
    EntityFactory(workspace=acme, name="taken")

    problems = refused(
        acme,
        definition(
            "taken",
            "SKILL",
            children=["ghost"],
            tools=[{"tool_id": "nope"}],
            planning=plan(
                step(1, "CHILD_ENTITY_INVOCATION", entity_id="other"),
                step(2, "TOOL_CALL", tool_id="missing"),
            ),
        ),
    )

    assert {p.path for p in problems} == {
        "identity.name",
        "hierarchy.children[0].child_id",
        "capabilities.tools[0].tool_id",
        "planning.static_plan.steps[0].target.entity_id",
        "planning.static_plan.steps[1].target.tool_id",
    }


def test_a_refused_update_leaves_the_stored_definition_unchanged(acme, chain):
    top, a, b, c = chain
    EntityFactory(workspace=acme, name="d")
    before = definition_of(Entity.objects.get(pk=a.pk))
    versions = list(a.versions.values_list("version", flat=True))
    update = definition("a", "AGENT", children=["b", "d", "top"])
    update["identity"]["description"] = "a new description"

    problems = refused(acme, update, entity=a)

    messages = [p.message for p in problems if p.path == "hierarchy.children[2].child_id"]
    assert any("creates a cycle: a → top → a" in m for m in messages)
    assert any("is a PROCESS and cannot be a child of the AGENT" in m for m in messages)
    after = Entity.objects.get(pk=a.pk)
    assert definition_of(after) == before
    assert after.description == "a does one thing well"
    assert list(after.child_links.values_list("child__name", flat=True)) == ["b"]
    assert list(a.versions.values_list("version", flat=True)) == versions


# Custom metrics (observability.metrics.custom_metrics)


def custom(*names: str) -> dict:
    return {
        "metrics": {"custom_metrics": [{"metric_name": n, "aggregation": "SUM"} for n in names]}
    }


def test_it_accepts_custom_metrics_named_by_a_key_or_a_dotted_path(acme):
    saved = entity_save(
        workspace=acme, definition=definition("m", observability=custom("score", "quality.score"))
    ).entity

    names = [m["metric_name"] for m in saved.observability["metrics"]["custom_metrics"]]
    assert names == ["score", "quality.score"]


def test_it_refuses_more_than_twenty_custom_metrics(acme):
    problems = refused(acme, definition("m", observability=custom(*(f"m{i}" for i in range(21)))))

    assert at(problems, "observability.metrics.custom_metrics") == "has 21 items; at most 20"


@pytest.mark.parametrize("name", ["has space", "1st", "a..b", "trailing.", "a-b"])
def test_it_refuses_a_custom_metric_name_that_is_not_a_key_path(acme, name):
    problems = refused(acme, definition("m", observability=custom(name)))

    assert at(problems, "observability.metrics.custom_metrics[0].metric_name").startswith(
        "must name a key of the output, or a dotted path to one"
    )


def test_it_refuses_a_custom_metric_declared_twice(acme):
    problems = refused(acme, definition("m", observability=custom("score", "cost", "score")))

    assert at(problems, "observability.metrics.custom_metrics[2].metric_name") == (
        "'score' is declared twice; give each custom metric its own name"
    )
