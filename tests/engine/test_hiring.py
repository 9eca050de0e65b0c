"""Hiring subordinates at run time (runs/engine/hiring.py), on both stores: a DELEGATE step
starts a child run of a delegation template with a role and a task, its budget reserved
from the hirer's while it runs and what it did not spend returned when it ends; the limits
(max_subordinates, max_budget_usd_each, the hirer's budget, max_recursion_depth) refuse a
hire with a clear reason; a fired subordinate fails its hirer's step with FIRED."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runs import services
from runs.engine import hiring
from tests.factories import WorkspaceFactory
from tests.marks import postgresql_only
from tests.support.runs import io, step
from tests.support.worlds import OrmWorld, World, advance_at_once


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def hire_step(order: int, role: str, task: str, budget: float | None = None, **more: Any) -> dict:
    hire = {"role": role, "task": task, "reason": f"{role} is needed", "budget_usd": budget}
    return step(order, f"Hire {role}", "DELEGATE", entity_id="specialist", hire=hire, **more)


def specialist(world: World, **sections: Any) -> str:
    """The template: a SKILL that answers its task (input {"task": ...})."""
    return world.add(
        "specialist", "SKILL", io_contract=io({"task": "string"}, answer="string"), **sections
    )


def coordinator(
    world: World,
    *steps: dict,
    max_cost: float | None = 1.0,
    delegation: dict | None = None,
    **sections: Any,
) -> str:
    rules = {"enabled": True, "templates": ["specialist"], **(delegation or {})}
    return world.add(
        "coordinator",
        "AGENT",
        max_cost=max_cost,
        capabilities={"delegation": rules},
        planning={"static_plan": {"enabled": True, "steps": list(steps)}},
        **sections,
    )


def test_a_hire_runs_the_template_with_its_role_and_task_and_returns_unspent_budget(world):
    specialist(world)
    coordinator(world, hire_step(1, "Market researcher", "Size the EU market", 0.25))
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))  # the hirer starts its subordinate and waits

    assert world.status(run) == "WAITING", world.error(run)
    (child,) = world.children(run)
    record = world.hire_record(child)
    assert record["role"] == "Market researcher"
    assert record["task"] == "Size the EU market"
    assert record["hired_reason"] == "Market researcher is needed"
    assert record["hired_by"] == run
    assert world.input(child) == {"task": "Size the EU market"}
    # Its budget is its own and set aside at the hirer's while it runs.
    assert world.budget(child)[0] == Decimal("0.25")
    assert world.budget(run)[:2] == (Decimal("1"), Decimal("0.25"))

    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.status(child) == "COMPLETED"
    budget, reserved, spent = world.budget(run)
    assert reserved == 0  # what the subordinate did not spend is returned
    assert spent == world.budget(child)[2]  # the hirer pays what it spent, no more
    # The role and the task are in its prompt.
    prompt = world.prompts(child)[0]
    assert "Your role: Market researcher." in prompt
    assert "Size the EU market" in prompt
    assert ("Hire Market researcher", 1, "COMPLETED") in world.step_statuses(run)


def test_a_hire_over_max_budget_usd_each_is_refused(world):
    specialist(world)
    coordinator(
        world, hire_step(1, "Analyst", "Analyse", 0.5), delegation={"max_budget_usd_each": 0.1}
    )
    run = world.run("coordinator", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "max_budget_usd_each $0.1" in message
    assert world.children(run) == []


def test_hires_over_max_subordinates_are_refused(world):
    specialist(world)
    coordinator(
        world,
        hire_step(1, "First", "One"),
        hire_step(2, "Second", "Two"),
        hire_step(3, "Third", "Three"),
        delegation={"max_subordinates": 2},
    )
    run = world.run("coordinator", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "has hired 2 subordinate(s); 1 more would pass its max_subordinates 2" in message
    assert len(world.children(run)) == 2


def test_a_hire_the_hirers_budget_has_no_room_for_is_refused(world):
    specialist(world)
    coordinator(world, hire_step(1, "Big spender", "Spend", 2.0), max_cost=1.0)
    run = world.run("coordinator", {})

    assert world.status(run) == "BLOCKED"  # on_budget_exhausted BLOCK: a person may raise it
    code, message = world.error(run)
    assert code == "BUDGET_EXHAUSTED"
    assert "the children to start ask $2" in message
    assert world.children(run) == []
    assert world.budget(run)[1] == 0  # nothing was set aside


def test_a_hire_is_refused_when_delegation_is_disabled_or_the_template_is_not_its_own():
    """At run time (a dynamic plan, the tool loop), whatever design-time validation let by."""
    definition: dict[str, Any] = {
        "identity": {"name": "coordinator"},
        "capabilities": {"delegation": {"enabled": False, "templates": ["specialist"]}},
    }
    asked = [hiring.HireRequest("Analyst", "Analyse", "specialist")]
    assert hiring.refusal(definition, 0, asked, {}) == (
        "VALIDATION_ERROR",
        "coordinator may not hire: its capabilities.delegation is disabled",
    )
    definition["capabilities"]["delegation"]["enabled"] = True
    assert hiring.refusal(definition, 0, asked, {}) is None
    stranger = [hiring.HireRequest("Analyst", "Analyse", "stranger")]
    assert hiring.refusal(definition, 0, stranger, {}) == (
        "VALIDATION_ERROR",
        "coordinator may not hire 'stranger': it is not one of its delegation templates "
        "(specialist)",
    )
    # By reference, a template resolved to its name matches.
    assert (
        hiring.refusal(
            definition, 0, [hiring.HireRequest("A", "B", "id-1")], {"id-1": "specialist"}
        )
        is None
    )
    assert hiring.refusal(definition, 5, asked, {})[0] == "LIMIT_EXCEEDED"  # max_subordinates 5


def test_a_hire_deeper_than_max_recursion_depth_is_refused(world):
    specialist(world)
    world.add(
        "coordinator",
        "AGENT",
        max_cost=1.0,
        max_depth=0,
        capabilities={"delegation": {"enabled": True, "templates": ["specialist"]}},
        planning={"static_plan": {"enabled": True, "steps": [hire_step(1, "A", "B")]}},
    )
    run = world.run("coordinator", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "max_recursion_depth 0" in message


def racing_hirers(world: World) -> None:
    """`root` ($1) starts `left` and `right` in parallel; each hires a specialist for $0.6."""
    specialist(world)
    for name in ("left", "right"):
        world.add(
            name,
            "AGENT",
            capabilities={"delegation": {"enabled": True, "templates": ["specialist"]}},
            planning={
                "static_plan": {"enabled": True, "steps": [hire_step(1, f"{name} hand", "Go", 0.6)]}
            },
        )
    world.add(
        "root",
        "AGENT",
        max_cost=1.0,
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
    )


def test_parallel_hirers_racing_for_the_last_of_the_budget_never_overshoot(world):
    """Two hirers under one budget of $1 each hire for $0.6: the first spawn reserves it,
    the second finds no room and is refused; what is set aside never passes the budget."""
    racing_hirers(world)
    root = world.start("root", {})
    world.advance(world.queue.pop(0))  # the root starts both hirers
    hirers = world.children(root)
    assert len(hirers) == 2
    for hirer in hirers:  # each hirer, in turn, asks for $0.6 of the root's $1
        world.queue.remove(hirer)
        world.advance(hirer)
        assert world.budget(root)[1] <= Decimal("1")

    hired = [c for h in hirers for c in world.children(h)]
    assert len(hired) == 1
    assert world.budget(root)[1] == Decimal("0.6")
    refused = [h for h in hirers if not world.children(h)]
    assert len(refused) == 1
    assert world.error(refused[0])[0] == "BUDGET_EXHAUSTED"

    world.advance_all()
    assert world.budget(root)[1] == 0
    assert world.status(hired[0]) == "COMPLETED"


def test_a_fired_subordinate_fails_its_hirers_step_with_the_reason(world):
    specialist(world)
    coordinator(world, hire_step(1, "Writer", "Write it", 0.3))
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))
    (child,) = world.children(run)
    world.queue.clear()

    world.fire(child, "the draft is off topic")
    world.queue.append(child)
    world.advance_all()

    assert world.status(child) == "CANCELLED"
    record = world.hire_record(child)
    assert record["fired_reason"] == "the draft is off topic"
    assert record["fired_by"] == "operator"
    assert world.status(run) == "FAILED"
    assert world.error(run) == ("FIRED", "specialist was fired: the draft is off topic")
    assert ("Hire Writer", 1, "FAILED") in world.step_statuses(run)
    assert world.budget(run)[1] == 0  # its budget is returned
    assert "run.fired" in world.event_types(world.trace(run))


def test_firing_a_run_that_was_not_hired_is_refused(world):
    specialist(world)
    run = world.start("specialist", {"task": "x"})
    with pytest.raises(Exception, match="not hired"):
        world.fire(run, "no")


ROUNDS = 3


@pytest.mark.django_db(transaction=True)
@postgresql_only(
    "SQLite lets one writer in at a time, so there is no race to test; it runs on "
    "PostgreSQL (DATABASE_URL)"
)
def test_two_workers_hiring_at_once_never_overshoot_the_budget(monkeypatch):
    """The ORM store with two workers in two threads: two hirers under one budget of $1
    each hire for $0.6 at the same moment; one hire is made, the other is refused, and
    what is set aside never passes the budget."""
    # The test's threads are the only workers: starts are not handed to the executor.
    monkeypatch.setattr(services, "enqueue", lambda run_id: None)
    world = OrmWorld(WorkspaceFactory(slug="race"))
    racing_hirers(world)
    for _ in range(ROUNDS):
        root = world.start("root", {})
        world.advance(world.queue.pop(0))
        hirers = world.children(root)
        for hirer in hirers:
            world.queue.remove(hirer)
        advance_at_once(world, hirers)

        hired = [c for h in hirers for c in world.children(h)]
        assert len(hired) == 1
        assert world.budget(root)[1] == Decimal("0.6")
        assert sorted(world.error(h)[0] for h in hirers) == ["", "BUDGET_EXHAUSTED"]
        world.advance_all()
        assert world.budget(root)[1] == 0


def spawn_checked(world: World) -> str:
    specialist(world)
    return coordinator(
        world,
        hire_step(1, "Analyst", "Count the widgets", 0.2),
        governance={
            "cost_controls": {"max_cost_usd": 1.0},
            "human_oversight": {"hitl_checkpoints": [{"trigger": "SUBAGENT_SPAWN"}]},
        },
    )


def test_a_subagent_spawn_checkpoint_asks_a_person_before_the_hire(world):
    spawn_checked(world)
    run = world.run("coordinator", {})

    assert world.status(run) == "PAUSED"
    assert world.children(run) == []  # nobody is hired before a person says so
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["status"], asked["subject"]) == (
        "SUBAGENT_SPAWN",
        "PENDING",
        "hire",
    )

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    assert world.hire_record(child)["role"] == "Analyst"


def test_a_hire_a_person_rejects_is_not_made(world):
    spawn_checked(world)
    run = world.run("coordinator", {})

    world.decide(run, "reject", notes="too dear")
    world.advance_all()
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "REJECTED"
    assert "too dear" in message
    assert world.children(run) == []


def test_a_person_may_edit_a_plan_that_hires_and_the_hire_keeps_its_record(world):
    specialist(world)
    optional = hire_step(1, "Analyst", "Count the widgets", 0.2)
    optional["required"] = False
    coordinator(
        world,
        optional,
        hire_step(2, "Editor", "Tidy the count", 0.2),
        governance={
            "cost_controls": {"max_cost_usd": 1.0},
            "human_oversight": {"hitl_checkpoints": [{"trigger": "AFTER_PLANNING"}]},
        },
    )
    run = world.run("coordinator", {})
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)

    world.decide(run, "edit", payload=[asked["payload"][1]])  # the editor only
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    assert world.hire_record(child)["role"] == "Editor"
