"""`io_contract.state_contract`, on both stores: a child reads from its caller's state only
the keys it declares in `reads_from`, and writes at the top of that state only the keys it
declares in `writes_to` (its whole output still lands under the step's name). A child that
declares nothing reads and writes as before."""

from __future__ import annotations

from typing import Any

import pytest

from runs.engine.plan import state_keys_read
from tests.support.runs import step
from tests.support.worlds import World, io


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def contract(reads: list[str] = (), writes: list[str] = (), **outputs: str) -> dict[str, Any]:
    contract = io({"topic": "string", "tone": "string"}, **outputs)
    contract["input"]["schema"]["required"] = []
    contract["state_contract"] = {"reads_from": list(reads), "writes_to": list(writes)}
    return contract


def parent(world: World, link: dict[str, Any], **outputs: str) -> str:
    return world.add(
        "lead",
        "AGENT",
        io_contract=io({"topic": "string", "tone": "string"}, **outputs),
        children=[link],
    )


def test_a_child_reads_only_the_keys_it_declares(world):
    world.add("writer", io_contract=contract(reads=["topic"], summary="string"))
    parent(world, {"child_id": "writer"}, summary="string")
    run = world.run("lead", {"topic": "owls", "tone": "dry"})

    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    assert world.input(child) == {"topic": "owls"}  # "tone" is in the state, not declared


def test_a_child_that_declares_nothing_reads_every_matching_key(world):
    world.add("writer", io_contract=contract(summary="string"))
    parent(world, {"child_id": "writer"}, summary="string")
    run = world.run("lead", {"topic": "owls", "tone": "dry"})

    (child,) = world.children(run)
    assert world.input(child) == {"topic": "owls", "tone": "dry"}


def test_a_child_writes_only_the_keys_it_declares(world):
    world.add("writer", io_contract=contract(writes=["summary"], summary="string", notes="string"))
    lead = world.add(
        "lead",
        "AGENT",
        io_contract=io({"topic": "string"}, summary="string"),
        children=[{"child_id": "writer"}],
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    step(1, "Write", "CHILD_ENTITY_INVOCATION", entity_id="writer"),
                    step(2, "Check", "THOUGHT"),
                ],
            }
        },
    )
    assert lead
    run = world.run("lead", {"topic": "owls"})

    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    written = world.output(child)
    assert set(written) == {"summary", "notes"}
    (check_prompt,) = [p for p in world.prompts(run) if "Check" in p]
    assert written["summary"] in check_prompt
    # "notes" reached the state only under the step's name, not at its top level.
    assert f'"notes": "{written["notes"]}"' in check_prompt
    assert check_prompt.count(written["notes"]) == 1


def test_a_mapping_that_reads_an_undeclared_key_fails_the_step_naming_it(world):
    """A mapping the engine meets that no saved definition showed (here one saved before the
    child narrowed what it reads) is checked when the child starts."""
    world.add("writer", io_contract=contract(summary="string"))
    parent(
        world,
        {"child_id": "writer", "input_mapping": {"topic": {"var": "input.tone"}}},
        summary="string",
    )
    world.edit("writer", io_contract=contract(reads=["topic"], summary="string"))
    run = world.run("lead", {"topic": "owls", "tone": "dry"})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert message == (
        "step 'writer': its input mapping reads 'tone' from the state, which 'writer' does "
        "not declare in io_contract.state_contract.reads_from (topic)"
    )
    assert world.children(run) == []


@pytest.mark.parametrize(
    ("expression", "keys"),
    [
        ({"var": "topic"}, {"topic"}),
        ({"var": "input.topic"}, {"topic"}),
        ({"var": "review.score"}, {"review"}),
        ({"var": ["topic", "none"]}, {"topic"}),
        ({"var": "iteration"}, set()),
        ({"cat": [{"var": "a"}, " and ", {"var": "b"}]}, {"a", "b"}),
        ({"data": {"message": {"var": "m"}}}, {"m"}),
        ({"missing": ["a", "b.c"]}, {"a", "b"}),
        ({"missing_some": [1, ["x", "y"]]}, {"x", "y"}),
        ("literal", set()),
        ({"var": ""}, None),
        ({"var": {"cat": ["to", "pic"]}}, None),
    ],
)
def test_the_keys_an_expression_reads(expression, keys):
    assert state_keys_read(expression) == keys
