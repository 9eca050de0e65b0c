"""A child link may name the child's version: an exact one or an npm-style range. The run takes
the newest version the range allows among those saved when its root started; without one, the
newest saved by then (tests/engine/test_pinned_trees.py). A static plan's step and a dynamic
plan's step that name the child take its link's range. On both stores."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support.worlds import OrmWorld, World, io

pytestmark = pytest.mark.smoke


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def persona(name: str, prompt: str) -> dict:
    return {"name": name, "description": f"answers {name}", "persona": {"system_prompt": prompt}}


def three_writers(world: World) -> None:
    """`writer` saved three times: 1.0.0, 1.0.1 (a PATCH: its prompt) and 2.0.0 (a MAJOR: a
    new required input field)."""
    world.add("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-one."))
    world.edit("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-two."))
    world.edit(
        "writer",
        io_contract=io({"tone": "string"}, ok="boolean"),
        identity=persona("writer", "W-three."),
    )


def only_child(world: World, run: str) -> str:
    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    return child


@pytest.mark.parametrize(
    ("wanted", "version", "prompt"),
    [
        ("^1.0.0", "1.0.1", "W-two."),
        ("~1.0", "1.0.1", "W-two."),
        (">=1.0.0 <2.0.0", "1.0.1", "W-two."),
        ("1.x", "1.0.1", "W-two."),
        ("1.0.0", "1.0.0", "W-one."),
        ("^2.0.0", "2.0.0", "W-three."),
        (None, "2.0.0", "W-three."),
    ],
)
def test_a_link_runs_the_newest_version_its_range_allows(world, wanted, version, prompt):
    three_writers(world)
    world.add("lead", "AGENT", children=[{"child_id": "writer", "version": wanted}])

    child = only_child(world, world.run("lead", {"tone": "dry"}))

    assert world.version(child) == version
    assert prompt in world.prompts(child)[0]


def test_a_range_takes_no_version_saved_after_the_run_started(world):
    world.add("gate", io_contract=io(None, ok="boolean"))
    world.add("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-one."))
    world.add("lead", "AGENT", children=["gate", {"child_id": "writer", "version": "^1.0.0"}])
    run = world.start("lead", {})
    world.advance(world.queue.pop(0))  # the gate runs; the writer is not started yet

    world.edit("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-two."))
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    (_, writer) = world.children(run)
    assert world.version(writer) == "1.0.0"
    assert "W-one." in world.prompts(writer)[0]
    # The next run takes the new version, which the range allows.
    (_, again) = world.children(world.run("lead", {}))
    assert world.version(again) == "1.0.1"


def test_two_parents_of_one_trace_run_the_versions_each_asks_for(world):
    three_writers(world)
    takes_tone = io({"tone": "string"}, ok="boolean")
    for name, link in (
        ("old_hand", {"child_id": "writer", "version": "1.0.0"}),
        ("new_hand", {"child_id": "writer", "version": "^2.0.0"}),
        ("plain_hand", "writer"),
    ):
        world.add(name, "SKILL", children=[link], io_contract=takes_tone)
    world.add("lead", "AGENT", children=["old_hand", "new_hand", "plain_hand"])

    run = world.run("lead", {"tone": "dry"})

    assert world.status(run) == "COMPLETED", world.error(run)
    writers = [only_child(world, hand) for hand in world.children(run)]
    assert [world.version(w) for w in writers] == ["1.0.0", "2.0.0", "2.0.0"]


def test_a_static_plan_step_takes_its_links_range(world):
    three_writers(world)
    step = {
        "step_id": "write",
        "order": 1,
        "name": "Write",
        "type": "CHILD_ENTITY_INVOCATION",
        "target": {"entity_id": "writer"},
    }
    world.add(
        "lead",
        "AGENT",
        children=[{"child_id": "writer", "version": "~1.0"}],
        planning={"static_plan": {"enabled": True, "steps": [step]}},
    )

    child = only_child(world, world.run("lead", {"tone": "dry"}))

    assert world.version(child) == "1.0.1"


def test_a_dynamic_plans_child_step_takes_its_links_range(world):
    three_writers(world)
    world.add(
        "lead",
        "AGENT",
        children=[{"child_id": "writer", "version": "1.0.0"}],
        planning={"dynamic_planning": {"enabled": True, "planning_prompt": "Plan the steps."}},
    )

    run = world.run("lead", {"tone": "dry"})

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.events_of(run, "plan.created") or world.events_of(run, "plan.reconciled")
    children = world.children(run)
    assert children, "the dynamic plan invoked no child"
    assert {world.version(child) for child in children} == {"1.0.0"}


def test_a_range_no_version_saved_by_the_start_allows_fails_the_step_naming_it(world):
    world.add("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-one."))
    world.edit("writer", io_contract=io(None, ok="boolean"), identity=persona("writer", "W-two."))
    world.add("lead", "AGENT", children=[{"child_id": "writer", "version": "1.0.0"}])
    world.forget_version("writer", "1.0.0")  # as if its row were deleted

    run = world.run("lead", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert "matches 1.0.0" in message
    assert "hierarchy.children[0].version" in message
    assert "it had only 1.0.1 then" in message
    assert world.children(run) == []


@pytest.mark.django_db
def test_ranged_links_cost_one_query_per_advance_of_their_parent_on_the_orm(acme):
    """The versions of a parent's ranged links are read in one query per advance; links
    without a range cost nothing more than before."""
    world = OrmWorld(acme)
    names = ["a", "b", "c"]
    for name in names:
        world.add(name, io_contract=io(None, ok="boolean"))
        world.edit(name, io_contract=io(None, ok="boolean"), identity=persona(name, "Again."))
    world.add("plain", "AGENT", children=names)
    world.add("ranged", "AGENT", children=[{"child_id": n, "version": "^1.0.0"} for n in names])
    counted = {}
    for name in ("plain", "ranged", "plain", "ranged"):  # the first two fill the caches
        with CaptureQueriesContext(connection) as queries:
            run = world.run(name, {})
        assert world.status(run) == "COMPLETED", world.error(run)
        counted[name] = len(queries.captured_queries)

    # The parent advances once per child it starts: one query more each time at most.
    assert 0 < counted["ranged"] - counted["plain"] <= len(names)
