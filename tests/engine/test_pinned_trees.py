"""A run pins the version of every entity of its tree when it starts: an edit of a child
while the run is under way makes a new version that run never sees (the next run does).
On both stores."""

from __future__ import annotations

import pytest

from tests.support.worlds import World, io

pytestmark = pytest.mark.smoke


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def persona(name: str, prompt: str) -> dict:
    return {"name": name, "description": f"answers {name}", "persona": {"system_prompt": prompt}}


def test_a_child_edited_mid_run_runs_as_it_was_when_the_run_started(world):
    world.add("first", io_contract=io(None, ok="boolean"))
    world.add(
        "second",
        io_contract=io(None, ok="boolean"),
        identity=persona("second", "You are as before."),
    )
    world.add("lead", "AGENT", children=["first", "second"])
    run = world.start("lead", {})
    world.advance(world.queue.pop(0))  # the lead starts its first child, and waits
    assert world.children(run)  # under way

    world.edit(
        "second", io_contract=io(None, ok="boolean"), identity=persona("second", "You are NEW.")
    )
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    (first, second) = world.children(run)
    (prompt,) = world.prompts(second)
    assert "You are as before." in prompt
    assert "You are NEW." not in prompt

    # The next run takes the new version.
    again = world.run("lead", {})
    (_, second_again) = world.children(again)
    assert "You are NEW." in world.prompts(second_again)[0]


def test_a_grandchild_is_pinned_too(world):
    world.add(
        "leaf", io_contract=io(None, ok="boolean"), identity=persona("leaf", "Leaf, as before.")
    )
    world.add("middle", "SKILL", children=["leaf"])
    world.add("gate", io_contract=io(None, ok="boolean"))
    world.add("top", "AGENT", children=["gate", "middle"])
    run = world.start("top", {})
    world.advance(world.queue.pop(0))

    world.edit("leaf", io_contract=io(None, ok="boolean"), identity=persona("leaf", "Leaf, NEW."))
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    (_, middle) = world.children(run)
    (leaf,) = world.children(middle)
    assert "Leaf, as before." in world.prompts(leaf)[0]
