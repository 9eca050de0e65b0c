"""Dynamic planning: the plan schema, the request, reading the answer, and reconciliation."""

from __future__ import annotations

import copy
import itertools
import json
from decimal import Decimal
from typing import Any

import jsonschema
import pytest

from runs.engine import planning
from runs.engine.plan import build_static_plan
from runs.engine.planning import PlanRejected, parse_dynamic_plan, reconcile, reconcile_for
from runs.engine.ports import ModelReply, ModelRequest
from runs.engine.synthesis import synthesize

pytestmark = pytest.mark.smoke

CHILD = "CHILD_ENTITY_INVOCATION"
NAMES = {"c1": "Analyst", "c2": "Writer", "c3": "Producer"}
ALL = {
    "can_add_steps": True,
    "can_skip_optional_steps": True,
    "can_reorder_steps": True,
    "can_change_tools": True,
}
NONE = dict.fromkeys(ALL, False)
PLAN_KEYS = set(
    build_static_plan({"hierarchy": {"children": []}, "planning": {"static_plan": {}}})[0]
)


def tool(tool_id: str, description: str = "") -> dict[str, Any]:
    return {
        "tool_id": tool_id,
        "name": tool_id,
        "description": description or f"The {tool_id} tool",
        "function_schema": {"name": tool_id, "parameters": {"type": "object", "properties": {}}},
    }


def static_step(order: int, name: str, **target: Any) -> dict[str, Any]:
    required = target.pop("required", True)
    kind = target.pop("type", CHILD if "entity_id" in target else "TOOL_CALL")
    return {
        "step_id": f"s{order}",
        "order": order,
        "name": name,
        "type": kind,
        "target": target,
        "required": required,
        "exit_conditions": target.pop("exit_conditions", []),
    }


def definition(
    *,
    steps: list[dict[str, Any]] | None = None,
    tools: tuple[str, ...] = ("search", "render"),
    strategy: str = "HYBRID",
    deviations: dict[str, bool] | None = None,
    fallback: str = "ADAPTIVE",
    prompt: str = "Plan a video ad for {company_name}.",
    constraints: tuple[str, ...] = ("Review before publishing",),
) -> dict[str, Any]:
    if steps is None:
        steps = [
            static_step(1, "Analyze", entity_id="c1"),
            static_step(2, "Search", tool_id="search", required=False),
            static_step(3, "Write", entity_id="c2"),
        ]
    return {
        "identity": {"name": "video_ad", "description": "Make a video ad", "persona": {}},
        "hierarchy": {
            "children": [
                {"child_id": "c1", "relationship": "SEQUENTIAL", "condition": {"enabled": False}},
                {
                    "child_id": "c2",
                    "relationship": "PARALLEL",
                    "input_mapping": {"brief": {"var": "summary"}},
                    "condition": {"enabled": False},
                },
                {
                    "child_id": "c3",
                    "relationship": "CONDITIONAL",
                    "condition": {"enabled": True, "expression": {">": [{"var": "score"}, 5]}},
                },
            ]
        },
        "logic_gate": {"reasoning_config": {"reasoning_mode": "REACT"}},
        "planning": {
            "static_plan": {"enabled": bool(steps), "steps": steps, "fallback_behavior": fallback},
            "dynamic_planning": {
                "enabled": True,
                "planning_prompt": prompt,
                "constraints": list(constraints),
                "reconciliation_strategy": strategy,
                "allowed_deviations": NONE if deviations is None else deviations,
            },
        },
        "capabilities": {"tools": [tool(t) for t in tools]},
    }


def reply(steps: Any, *, as_text: bool = False) -> ModelReply:
    parsed = {"steps": steps} if isinstance(steps, list) else steps
    return ModelReply(
        content=json.dumps(parsed) if as_text or parsed is not None else "",
        prompt_tokens=10,
        completion_tokens=10,
        cost_usd=Decimal("0"),
        latency_ms=1,
        provider="local",
        model="offline",
        parsed=None if as_text else parsed,
    )


def answer(*targets: str) -> list[dict[str, str]]:
    """A model answer: each target, optionally `target=name`."""
    out = []
    for spec in targets:
        target, _, name = spec.partition("=")
        out.append({"target": target, "name": name or target.split(":")[-1], "instruction": ""})
    return out


def factory(**kwargs: Any) -> ModelRequest:
    return ModelRequest(provider="local", model="offline", **kwargs)


# -- the schema and the request ----------------------------------------------------------------


def test_schema_offers_thought_children_and_static_tools_only() -> None:
    schema = planning.plan_schema(definition(), NAMES)
    targets = schema["properties"]["steps"]["items"]["properties"]["target"]["enum"]
    assert targets == [
        "THOUGHT",
        f"{CHILD}:Analyst",
        f"{CHILD}:Writer",
        f"{CHILD}:Producer",
        "TOOL_CALL:search",
    ]


def test_schema_offers_every_tool_when_can_change_tools() -> None:
    schema = planning.plan_schema(definition(deviations={**NONE, "can_change_tools": True}), NAMES)
    targets = schema["properties"]["steps"]["items"]["properties"]["target"]["enum"]
    assert "TOOL_CALL:render" in targets and "TOOL_CALL:search" in targets


def test_schema_offers_every_tool_when_there_is_no_static_plan() -> None:
    schema = planning.plan_schema(definition(steps=[]), NAMES)
    targets = schema["properties"]["steps"]["items"]["properties"]["target"]["enum"]
    assert {"TOOL_CALL:render", "TOOL_CALL:search"} <= set(targets)


def test_schema_names_children_by_reference_when_their_names_are_unknown() -> None:
    schema = planning.plan_schema(definition(), {})
    assert f"{CHILD}:c1" in schema["properties"]["steps"]["items"]["properties"]["target"]["enum"]


def test_schema_is_a_valid_json_schema_bounding_the_steps() -> None:
    schema = planning.plan_schema(definition(), NAMES)
    jsonschema.Draft202012Validator.check_schema(schema)
    steps = schema["properties"]["steps"]
    assert (steps["minItems"], steps["maxItems"]) == (1, planning.PLAN_MAX_STEPS)


@pytest.mark.parametrize("seed", [str(n) for n in range(40)])
def test_every_offline_model_answer_is_a_valid_plan(seed: str) -> None:
    """The offline model picks each enum value independently: any such answer must parse."""
    d = definition(deviations={**NONE, "can_change_tools": True})
    schema = planning.plan_schema(d, NAMES)
    proposed = synthesize(schema, seed=seed)
    jsonschema.validate(proposed, schema)
    steps = parse_dynamic_plan(reply(proposed), d, NAMES)
    assert not isinstance(steps, PlanRejected)
    plan, notes = reconcile_for(d, build_static_plan(d, NAMES), steps)
    assert {"Analyze", "Write"} <= {s["name"] for s in plan} and notes


def test_planning_request_carries_prompt_constraints_static_plan_options_and_input() -> None:
    d = definition()
    static = build_static_plan(d, NAMES)
    request = planning.planning_request(
        d,
        child_names=NAMES,
        static=static,
        run_input={"company_name": "Acme"},
        request_factory=factory,
    )
    assert request.purpose == "PLAN"
    assert request.response_schema == planning.plan_schema(d, NAMES)
    system, user = request.messages
    assert "video_ad" in system["content"]
    text = user["content"]
    assert "Plan a video ad for Acme." in text
    assert "- Review before publishing" in text
    assert f"1. Analyze: {CHILD}:Analyst (required)" in text
    assert "2. Search: TOOL_CALL:search (optional)" in text
    assert "may not add steps" in text and "may not reorder steps" in text
    assert "- TOOL_CALL:search: The search tool" in text
    assert f"- {CHILD}:Producer: invoke the child entity Producer" in text
    assert '"company_name": "Acme"' in text
    assert text.startswith("Think step by step")  # the REACT strategy


def test_planning_request_for_a_new_plan_carries_feedback_and_context() -> None:
    d = definition()
    request = planning.planning_request(
        d,
        child_names=NAMES,
        static=build_static_plan(d, NAMES),
        run_input={},
        request_factory=factory,
        context={"draft": "v1"},
        feedback="the video is too long",
    )
    text = request.messages[-1]["content"]
    assert "did not pass review: the video is too long" in text
    assert '"draft": "v1"' in text


def test_planning_request_without_a_static_plan_says_there_is_none() -> None:
    d = definition(steps=[], prompt="")
    request = planning.planning_request(
        d,
        child_names=NAMES,
        static=build_static_plan(d, NAMES),  # derived from links: not a blueprint
        run_input={},
        request_factory=factory,
    )
    text = request.messages[-1]["content"]
    assert "There is no static plan" in text
    assert "Plan the steps that best accomplish" in text


# -- reading the answer ------------------------------------------------------------------------


def test_parse_turns_targets_into_plan_steps() -> None:
    d = definition()
    steps = parse_dynamic_plan(
        reply(
            [
                {"target": f"{CHILD}:Writer", "name": "Draft", "instruction": "ignored"},
                {"target": "TOOL_CALL:search", "name": "Look up", "instruction": ""},
                {"target": "THOUGHT", "name": "Reflect", "instruction": "Is it {tone}?"},
            ]
        ),
        d,
        NAMES,
    )
    assert not isinstance(steps, PlanRejected)
    assert all(set(step) == PLAN_KEYS for step in steps)
    writer, search, thought = steps
    assert writer["type"] == CHILD and writer["target_entity"] == "c2"
    assert writer["prompt_template"] is None and writer["required"] is False
    assert writer["relationship"] == "PARALLEL"
    assert writer["input_mapping"] == {"brief": {"var": "summary"}}
    assert (search["type"], search["tool_id"], search["target_entity"]) == (
        "TOOL_CALL",
        "search",
        None,
    )
    assert thought["type"] == "THOUGHT" and thought["prompt_template"] == "Is it {tone}?"
    assert [s["key"] for s in steps] == ["dynamic-1", "dynamic-2", "dynamic-3"]


def test_parse_keeps_a_conditional_link_condition() -> None:
    steps = parse_dynamic_plan(reply(answer(f"{CHILD}:Producer")), definition(), NAMES)
    assert not isinstance(steps, PlanRejected)
    assert steps[0]["condition"] == {">": [{"var": "score"}, 5]}


def test_parse_names_a_nameless_step_after_its_target() -> None:
    steps = parse_dynamic_plan(
        reply([{"target": f"{CHILD}:Analyst", "name": " ", "instruction": ""}]), definition(), NAMES
    )
    assert not isinstance(steps, PlanRejected)
    assert steps[0]["name"] == "Analyst"


def test_parse_accepts_a_child_named_by_its_reference() -> None:
    steps = parse_dynamic_plan(reply(answer(f"{CHILD}:c3")), definition(), NAMES)
    assert not isinstance(steps, PlanRejected)
    assert steps[0]["target_entity"] == "c3"


def test_parse_reads_the_answer_text_when_nothing_was_parsed() -> None:
    steps = parse_dynamic_plan(reply(answer("THOUGHT"), as_text=True), definition(), NAMES)
    assert not isinstance(steps, PlanRejected)
    assert steps[0]["type"] == "THOUGHT"


def test_parse_rejects_an_unknown_child_naming_it() -> None:
    rejected = parse_dynamic_plan(reply(answer(f"{CHILD}:Ghost")), definition(), NAMES)
    assert isinstance(rejected, PlanRejected)
    assert rejected.code == "VALIDATION_ERROR"
    assert "'Ghost', which is not a child of this entity" in rejected.message
    assert "Analyst, Writer, Producer" in rejected.message


def test_parse_rejects_an_unknown_tool_naming_it() -> None:
    rejected = parse_dynamic_plan(reply(answer("TOOL_CALL:rm_rf")), definition(), NAMES)
    assert isinstance(rejected, PlanRejected)
    assert "'rm_rf', which is not a tool of this entity (tools: search, render)" in rejected.message


def test_parse_rejects_a_new_tool_when_can_change_tools_is_false() -> None:
    rejected = parse_dynamic_plan(reply(answer("TOOL_CALL:render")), definition(), NAMES)
    assert isinstance(rejected, PlanRejected)
    assert "the tool 'render', which the static plan does not use" in rejected.message
    assert "can_change_tools is false" in rejected.message


def test_parse_accepts_a_new_tool_when_can_change_tools_is_true() -> None:
    d = definition(deviations={**NONE, "can_change_tools": True})
    steps = parse_dynamic_plan(reply(answer("TOOL_CALL:render")), d, NAMES)
    assert not isinstance(steps, PlanRejected)


def test_parse_reports_every_problem_at_once() -> None:
    rejected = parse_dynamic_plan(
        reply(answer(f"{CHILD}:Ghost", "THOUGHT", "TOOL_CALL:nope", "SING")), definition(), NAMES
    )
    assert isinstance(rejected, PlanRejected)
    assert len(rejected.problems) == 3
    assert rejected.problems[0].startswith("step 1 ")
    assert rejected.problems[1].startswith("step 3 ")
    assert "step 4 ('SING') has the target 'SING'; use one of: THOUGHT" in rejected.problems[2]


@pytest.mark.parametrize(
    ("parsed", "message"),
    [
        ({"steps": []}, "has no steps"),
        ({"plan": "later"}, 'is not {"steps": [...]}'),
        ("just text", 'is not {"steps": [...]}'),
        ({"steps": ["x"]}, "step 1 is not an object"),
        ({"steps": [{"name": "no target"}]}, "has no target"),
        ({"steps": answer("THOUGHT") * 26}, "26 steps; at most 25"),
    ],
)
def test_parse_rejects_a_malformed_plan(parsed: Any, message: str) -> None:
    rejected = parse_dynamic_plan(reply(parsed), definition(), NAMES)
    assert isinstance(rejected, PlanRejected)
    assert message in rejected.message


def test_parse_rejects_an_answer_that_is_not_json() -> None:
    bad = ModelReply("{not json", 1, 1, Decimal("0"), 1, "local", "offline")
    rejected = parse_dynamic_plan(bad, definition(), NAMES)
    assert isinstance(rejected, PlanRejected)
    assert "is not JSON" in rejected.message


# -- reconciliation ----------------------------------------------------------------------------


def step(key: str, name: str, *, required: bool = True, order: int = 0, **target: Any) -> dict:
    kind = CHILD if "entity" in target else "TOOL_CALL" if "tool" in target else "THOUGHT"
    return {
        "key": key,
        "name": name,
        "type": kind,
        "order": order,
        "target_entity": target.get("entity"),
        "tool_id": target.get("tool"),
        "prompt_template": None,
        "required": required,
        "exit_conditions": target.get("exits", []),
        "input_mapping": {},
        "relationship": "SEQUENTIAL",
        "condition": None,
    }


A = step("s1", "A", entity="a", order=1)
B = step("s2", "B", entity="b", order=2, required=False)
C = step("s3", "C", entity="c", order=3)
STATIC = [A, B, C]


def dyn(name: str, **target: Any) -> dict:
    return step(f"dynamic-{name}", name, required=False, **target)


def same(name: str) -> dict:
    """A dynamic step invoking the same child as the static step `name`."""
    return dyn(f"my {name}", entity=name.lower())


NEW = dyn("N", entity="n")


def names(plan: list[dict]) -> list[str]:
    return [s["name"] for s in plan]


def run(dynamic: list[dict], strategy: str, fallback: str = "ADAPTIVE", **allowed: bool):
    return reconcile(
        STATIC,
        dynamic,
        strategy=strategy,
        allowed_deviations={**NONE, **allowed},
        fallback_behavior=fallback,
    )


@pytest.mark.parametrize("strategy", ["STATIC_PRIORITY", "DYNAMIC_PRIORITY", "HYBRID"])
@pytest.mark.parametrize("fallback", ["STRICT", "ADAPTIVE", "DYNAMIC_ONLY"])
def test_a_plan_that_agrees_runs_the_static_steps(strategy: str, fallback: str) -> None:
    plan, notes = run([same("A"), same("B"), same("C")], strategy, fallback)
    assert plan == STATIC
    assert notes == ["the dynamic plan agrees with the static plan"]


def test_static_priority_appends_additions_when_allowed() -> None:
    plan, notes = run([NEW, same("A"), same("B"), same("C")], "STATIC_PRIORITY", can_add_steps=True)
    assert names(plan) == ["A", "B", "C", "N"]
    assert notes == [
        "added 'N' (CHILD_ENTITY_INVOCATION:n) after the static steps (STATIC_PRIORITY)"
    ]


def test_static_priority_rejects_additions_when_not_allowed() -> None:
    plan, notes = run([same("A"), same("B"), same("C"), NEW], "STATIC_PRIORITY")
    assert plan == STATIC
    assert notes == [
        "rejected the new step 'N' (CHILD_ENTITY_INVOCATION:n): can_add_steps is false"
    ]


def test_static_priority_keeps_static_order_and_optional_steps_even_when_allowed() -> None:
    plan, notes = run(
        [same("C"), same("A")],
        "STATIC_PRIORITY",
        can_reorder_steps=True,
        can_skip_optional_steps=True,
    )
    assert plan == STATIC
    assert notes[0] == "kept the static order (STATIC_PRIORITY); the plan proposed 'C', 'A'"
    assert "kept 'B' (CHILD_ENTITY_INVOCATION:b), which the dynamic plan left out" in notes[1]


def test_dynamic_priority_follows_the_dynamic_order_when_reordering_is_allowed() -> None:
    plan, notes = run(
        [same("C"), NEW, same("B"), same("A")],
        "DYNAMIC_PRIORITY",
        can_reorder_steps=True,
        can_add_steps=True,
    )
    assert names(plan) == ["C", "N", "B", "A"]
    assert "reordered the static steps as the dynamic plan proposed: 'C', 'B', 'A'" in notes


def test_dynamic_priority_keeps_static_order_in_place_when_reordering_is_not_allowed() -> None:
    plan, notes = run(
        [same("C"), NEW, same("B"), same("A")], "DYNAMIC_PRIORITY", can_add_steps=True
    )
    assert names(plan) == ["A", "N", "B", "C"]
    assert any("kept the static order: can_reorder_steps is false" in n for n in notes)


def test_dynamic_priority_restores_a_required_step_at_its_static_place() -> None:
    plan, notes = run([same("A"), same("C")], "DYNAMIC_PRIORITY", can_skip_optional_steps=True)
    assert names(plan) == ["A", "C"]
    plan, notes = run([same("A"), same("B")], "DYNAMIC_PRIORITY")
    assert names(plan) == ["A", "B", "C"]
    assert notes == [
        "restored the required step 'C' (CHILD_ENTITY_INVOCATION:c), which the dynamic plan "
        "left out: required steps are never dropped"
    ]
    plan, _ = run([same("B"), same("C")], "DYNAMIC_PRIORITY")
    assert names(plan) == ["A", "B", "C"]  # no earlier step: before the first later one


def test_dynamic_priority_skips_an_optional_step_only_when_allowed() -> None:
    plan, notes = run([same("A"), same("C")], "DYNAMIC_PRIORITY", can_skip_optional_steps=True)
    assert names(plan) == ["A", "C"]
    assert notes == [
        "skipped the optional step 'B' (CHILD_ENTITY_INVOCATION:b), as the dynamic plan proposed"
    ]
    plan, notes = run([same("A"), same("C")], "DYNAMIC_PRIORITY")
    assert names(plan) == ["A", "B", "C"]
    assert "can_skip_optional_steps is false" in notes[0]


def test_hybrid_inserts_additions_where_proposed() -> None:
    plan, notes = run(
        [dyn("First", tool="x"), same("A"), NEW, same("B"), same("C"), dyn("Last", tool="y")],
        "HYBRID",
        can_add_steps=True,
    )
    assert names(plan) == ["First", "A", "N", "B", "C", "Last"]
    assert notes == [
        "added 'First' (TOOL_CALL:x) where the dynamic plan put it",
        "added 'N' (CHILD_ENTITY_INVOCATION:n) where the dynamic plan put it",
        "added 'Last' (TOOL_CALL:y) where the dynamic plan put it",
    ]


def test_hybrid_never_moves_required_steps() -> None:
    plan, notes = run([same("C"), same("B"), same("A")], "HYBRID", can_reorder_steps=True)
    assert names(plan) == ["A", "C", "B"]  # B, optional, follows C as proposed; A stays first
    assert notes == [
        "HYBRID: required steps keep the static order; optional and new steps go where the "
        "dynamic plan put them (it proposed 'C', 'B', 'A')"
    ]


def test_hybrid_moves_an_optional_step_where_proposed_when_reordering_is_allowed() -> None:
    plan, _ = run([same("A"), same("C"), same("B")], "HYBRID", can_reorder_steps=True)
    assert names(plan) == ["A", "C", "B"]
    plan, notes = run([same("A"), same("C"), same("B")], "HYBRID")
    assert names(plan) == ["A", "B", "C"]
    assert notes == [
        "kept the static order: can_reorder_steps is false (the plan proposed 'A', 'C', 'B')"
    ]


def test_hybrid_skips_optional_steps_only_when_allowed() -> None:
    plan, _ = run([same("A"), same("C")], "HYBRID", can_skip_optional_steps=True)
    assert names(plan) == ["A", "C"]
    plan, notes = run([same("A"), same("C")], "HYBRID")
    assert names(plan) == ["A", "B", "C"]
    assert "can_skip_optional_steps is false" in notes[0]


def test_hybrid_restores_required_steps_the_plan_left_out() -> None:
    plan, notes = run([NEW], "HYBRID", can_add_steps=True, can_skip_optional_steps=True)
    assert names(plan) == ["N", "A", "C"]
    assert [n.split(" (")[0] for n in notes] == [
        "restored the required step 'A'",
        "skipped the optional step 'B'",
        "restored the required step 'C'",
        "added 'N'",
    ]


def test_strict_rejects_the_whole_plan_for_a_deviation_out_of_bounds() -> None:
    plan, notes = run([same("A"), NEW, same("C")], "DYNAMIC_PRIORITY", "STRICT", can_add_steps=True)
    assert plan == STATIC
    assert notes == [
        "STRICT: the dynamic plan was rejected, the static plan runs unchanged",
        "rejected: it leaves out the optional step 'B' (CHILD_ENTITY_INVOCATION:b) "
        "(can_skip_optional_steps is false)",
    ]


def test_strict_names_every_deviation_it_rejects() -> None:
    plan, notes = run([same("C"), same("A"), NEW], "HYBRID", "STRICT")
    assert plan == STATIC
    assert notes[1:] == [
        "rejected: it adds 'N' (CHILD_ENTITY_INVOCATION:n) (can_add_steps is false)",
        "rejected: it leaves out the optional step 'B' (CHILD_ENTITY_INVOCATION:b) "
        "(can_skip_optional_steps is false)",
        "rejected: it reorders the static steps to 'C', 'A' (can_reorder_steps is false)",
    ]


def test_strict_rejects_a_plan_that_drops_a_required_step_whatever_is_allowed() -> None:
    plan, notes = run([same("A"), same("B")], "DYNAMIC_PRIORITY", "STRICT", **ALL)
    assert plan == STATIC
    assert "rejected: it leaves out the required step 'C' (CHILD_ENTITY_INVOCATION:c)" in notes


def test_strict_merges_a_plan_within_bounds() -> None:
    plan, notes = run(
        [same("A"), NEW, same("C")],
        "HYBRID",
        "STRICT",
        can_add_steps=True,
        can_skip_optional_steps=True,
    )
    assert names(plan) == ["A", "N", "C"]
    assert not any(n.startswith("STRICT") for n in notes)


def test_dynamic_only_runs_the_plan_as_proposed_but_keeps_required_steps() -> None:
    plan, notes = run([NEW, same("C"), dyn("T", tool="t")], "STATIC_PRIORITY", "DYNAMIC_ONLY")
    assert names(plan) == ["N", "A", "C", "T"]
    assert notes[0].startswith("DYNAMIC_ONLY: the dynamic plan runs as proposed")
    assert any(n.startswith("restored the required step 'A'") for n in notes)
    assert any(n.startswith("skipped the optional step 'B'") for n in notes)


def test_additions_get_orders_after_the_static_plan_and_names_and_keys_of_their_own() -> None:
    clash = step("s1", "A", tool="t", required=False)  # same key and name as a static step
    plan, _ = run(
        [same("A"), clash, same("B"), same("C"), NEW], "STATIC_PRIORITY", can_add_steps=True
    )
    assert [(s["name"], s["key"], s["order"]) for s in plan] == [
        ("A", "s1", 1),
        ("B", "s2", 2),
        ("C", "s3", 3),
        ("A (2)", "s1 (2)", 4),
        ("N", "dynamic-N", 5),
    ]


def test_a_matched_step_runs_as_the_static_step() -> None:
    exiting = step("s1", "A", entity="a", order=7, exits=[{"condition": True, "next_step": "END"}])
    plan, _ = reconcile(
        [exiting],
        [dyn("whatever", entity="a")],
        strategy="HYBRID",
        allowed_deviations=ALL,
        fallback_behavior="ADAPTIVE",
    )
    assert plan == [exiting]


def test_thought_steps_match_by_name_ignoring_case_and_spacing() -> None:
    think = step("s1", "Draft  Script", order=1)
    plan, notes = reconcile(
        [think],
        [dyn("draft script")],
        strategy="HYBRID",
        allowed_deviations=NONE,
        fallback_behavior="STRICT",
    )
    assert plan == [think]
    assert notes == ["the dynamic plan agrees with the static plan"]


def test_a_child_invoked_twice_is_an_addition_the_second_time() -> None:
    plan, notes = run([same("A"), same("B"), same("C"), same("A")], "HYBRID", can_add_steps=True)
    assert names(plan) == ["A", "B", "C", "my A"]
    assert plan[-1]["key"] == "dynamic-my A" and plan[-1]["order"] == 4


def test_an_exit_condition_to_a_dropped_step_is_noted() -> None:
    jumper = step("s1", "A", entity="a", order=1, exits=[{"condition": True, "next_step": 2}])
    plan, notes = reconcile(
        [jumper, B, C],
        [same("A"), same("C")],
        strategy="HYBRID",
        allowed_deviations={**NONE, "can_skip_optional_steps": True},
        fallback_behavior="ADAPTIVE",
    )
    assert names(plan) == ["A", "C"]
    assert (
        "an exit condition jumping to step 2, which the reconciled plan does not have" in notes[-1]
    )


def test_without_a_static_plan_the_dynamic_plan_runs_as_proposed() -> None:
    plan, notes = reconcile(
        [], [NEW], strategy="STATIC_PRIORITY", allowed_deviations=NONE, fallback_behavior="STRICT"
    )
    assert names(plan) == ["N"] and plan[0]["order"] == 1
    assert notes == ["there is no static plan to reconcile with: the dynamic plan runs as proposed"]


def test_reconcile_for_treats_a_plan_derived_from_child_links_as_no_blueprint() -> None:
    d = definition(steps=[], strategy="STATIC_PRIORITY", fallback="STRICT")
    derived = build_static_plan(d, NAMES)
    assert len(derived) == 3
    steps = parse_dynamic_plan(reply(answer(f"{CHILD}:Writer")), d, NAMES)
    assert not isinstance(steps, PlanRejected)
    plan, notes = reconcile_for(d, derived, steps)
    assert [s["target_entity"] for s in plan] == ["c2"]


def test_reconcile_for_reads_the_definitions_settings() -> None:
    d = definition(strategy="DYNAMIC_PRIORITY", deviations={**NONE, "can_reorder_steps": True})
    static = build_static_plan(d, NAMES)
    steps = parse_dynamic_plan(
        reply(answer(f"{CHILD}:Writer", "TOOL_CALL:search", f"{CHILD}:Analyst")), d, NAMES
    )
    assert not isinstance(steps, PlanRejected)
    plan, _ = reconcile_for(d, static, steps)
    assert names(plan) == ["Write", "Search", "Analyze"]


def test_reconcile_changes_nothing_it_is_given() -> None:
    static, dynamic = copy.deepcopy(STATIC), [NEW, same("C")]
    before = copy.deepcopy((static, dynamic))
    plan, _ = reconcile(
        static, dynamic, strategy="HYBRID", allowed_deviations=ALL, fallback_behavior="ADAPTIVE"
    )
    plan[0]["name"] = "changed"
    assert (static, dynamic) == before


def test_unknown_settings_fall_back_to_the_cautious_ones() -> None:
    plan, notes = run([same("A"), same("C"), NEW], "WHATEVER", "MAYBE", can_add_steps=True)
    assert plan == STATIC  # STRICT: leaving out B is not allowed
    assert notes[0].startswith("STRICT")


DYNAMIC_PLANS = [
    [],
    [NEW],
    [same("C"), same("A")],
    [same("B")],
    [NEW, same("B"), dyn("T", tool="t"), same("A")],
    [same("A"), same("A"), same("C"), same("B")],
    [same("C"), NEW, same("B"), same("A"), dyn("Z")],
]
FLAGS = [
    dict(zip(ALL, values, strict=True))
    for values in itertools.product([False, True], repeat=len(ALL))
]


@pytest.mark.parametrize("strategy", ["STATIC_PRIORITY", "DYNAMIC_PRIORITY", "HYBRID"])
@pytest.mark.parametrize("fallback", ["STRICT", "ADAPTIVE", "DYNAMIC_ONLY"])
def test_the_bounds_hold_for_every_combination(strategy: str, fallback: str) -> None:
    for dynamic, allowed in itertools.product(DYNAMIC_PLANS, FLAGS):
        plan, notes = reconcile(
            STATIC,
            dynamic,
            strategy=strategy,
            allowed_deviations=allowed,
            fallback_behavior=fallback,
        )
        keys = [s["key"] for s in plan]
        assert "s1" in keys and "s3" in keys, "a required step was dropped"
        assert len(set(keys)) == len(keys) and len({s["name"] for s in plan}) == len(plan)
        assert notes
        if fallback == "DYNAMIC_ONLY":
            continue
        if not allowed["can_add_steps"]:
            assert set(keys) <= {"s1", "s2", "s3"}
        if not allowed["can_skip_optional_steps"]:
            assert "s2" in keys
        if not allowed["can_reorder_steps"] or strategy == "STATIC_PRIORITY":
            static_keys = [k for k in keys if k in ("s1", "s2", "s3")]
            assert static_keys == sorted(static_keys)
        if strategy == "HYBRID":
            assert keys.index("s1") < keys.index("s3")
