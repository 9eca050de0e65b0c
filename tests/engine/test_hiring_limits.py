"""Hires and the limits around them, on both stores: each hire is checked against its
workspace's monthly cost quota (a hire's own budget, when its hirer has no budget it could
be reserved from, holds its share of the quota while it runs), and a hirer that ends with
subordinates still running fires them, with why and who (its time limit or budget:
"limit"; it failed or was cancelled: "hirer")."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from entities.models import Workspace
from governance.models import AuditAction, AuditRecord
from runs import services
from runs.engine import hiring
from runs.engine.limits import month_start
from runs.engine.state import RunView
from runs.models import Run
from tests.factories import WorkspaceFactory
from tests.factories import definition as factory_definition
from tests.marks import postgresql_only
from tests.support.runs import io, step
from tests.support.worlds import OrmWorld, World, advance_at_once


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def hire_step(
    order: int, role: str, task: str, budget: float | None = None, template: str = "specialist"
) -> dict:
    hire = {"role": role, "task": task, "reason": f"{role} is needed", "budget_usd": budget}
    return step(order, f"Hire {role}", "DELEGATE", entity_id=template, hire=hire)


def specialist(world: World) -> str:
    return world.add("specialist", "SKILL", io_contract=io({"task": "string"}, answer="string"))


def hirer(
    world: World,
    name: str,
    *steps: dict,
    max_cost: float | None = None,
    templates: tuple[str, ...] = ("specialist",),
    **sections: Any,
) -> str:
    return world.add(
        name,
        "AGENT",
        max_cost=max_cost,
        capabilities={"delegation": {"enabled": True, "templates": list(templates)}},
        planning={"static_plan": {"enabled": True, "steps": list(steps)}},
        **sections,
    )


# -- the workspace's monthly cost quota ----------------------------------------------------


def test_a_hire_is_refused_once_the_workspace_has_spent_its_monthly_quota(world):
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Analyst", "Count the widgets"))
    earlier = world.run("specialist", {"task": "warm up"})  # this month's spend
    spent = world.counters(earlier)[0]
    assert spent > 0
    run = world.start("coordinator", {})
    world.set_monthly_cost_quota(Decimal(0))  # lowered while it runs, below what was spent

    world.advance_all()

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert f"has spent ${spent.normalize()} of its $0 monthly cost quota" in message
    assert world.children(run) == []


def test_a_hires_budget_that_would_pass_the_quota_is_refused(world):
    """The hirer has no budget of its own: the hire's $0.5 is checked against the quota."""
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Analyst", "Count the widgets", 0.5))
    world.set_monthly_cost_quota(Decimal("0.3"))

    run = world.run("coordinator", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "budget of $0.5 would take" in message
    assert "past its $0.3 monthly cost quota ($0 spent, $0 held" in message
    assert world.children(run) == []
    assert world.quota_held() == 0


def test_a_hire_inside_its_hirers_budget_is_not_counted_against_the_quota_again(world):
    """The root's budget of $1 was counted when it started: a hire reserved from it is not
    counted again, though the quota has only $1 of room."""
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Analyst", "Count the widgets", 0.5), max_cost=1.0)
    world.set_monthly_cost_quota(Decimal("1"))
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))

    assert world.status(run) == "WAITING", world.error(run)
    assert world.quota_held() == 0
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


def test_a_hires_budget_holds_its_share_of_the_quota_until_it_ends(world):
    """$1 of quota: a $0.6 hire holds $0.6 while it runs, so a second hire of $0.6 at the
    same time would be refused; once the first ends its hold is given back and the second,
    after it, is made."""
    specialist(world)
    hirer(
        world,
        "coordinator",
        hire_step(1, "First", "One", 0.6),
        hire_step(2, "Second", "Two", 0.6),
    )
    world.set_monthly_cost_quota(Decimal("1"))
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))

    assert world.status(run) == "WAITING", world.error(run)
    assert world.quota_held() == Decimal("0.6")
    (first,) = world.children(run)
    world.queue.remove(first)
    world.advance(first)
    assert world.status(first) == "COMPLETED"
    assert world.quota_held() == 0
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert len(world.children(run)) == 2
    assert world.quota_held() == 0


ROUNDS = 3


@pytest.mark.django_db(transaction=True)
@postgresql_only(
    "SQLite lets one writer in at a time, so there is no race to test; it runs on "
    "PostgreSQL (DATABASE_URL)"
)
def test_two_hires_at_once_never_both_take_the_last_of_the_quota(monkeypatch):
    """Two workers in two threads: two hirers with no budget each hire for $0.6 at the same
    moment under a monthly quota of $1; one hire is made, the other refused."""
    monkeypatch.setattr(services, "enqueue", lambda run_id: None)
    workspace = WorkspaceFactory(slug="quota-race")
    world = OrmWorld(workspace)
    specialist(world)
    for name in ("left", "right"):
        hirer(world, name, hire_step(1, f"{name} hand", "Go", 0.6))
    world.add(
        "root",
        "AGENT",
        children=[
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
    )
    world.set_monthly_cost_quota(Decimal("100"))
    for _ in range(ROUNDS):
        root = world.start("root", {})
        world.advance(world.queue.pop(0))
        hirers = world.children(root)
        for each in hirers:
            world.queue.remove(each)
        # Whatever this month cost so far, the quota has room for one hire of $0.6.
        Workspace.objects.filter(pk=workspace.pk).update(
            monthly_cost_quota_usd=_month_spent(workspace) + Decimal("1")
        )
        advance_at_once(world, hirers)

        hired = [c for h in hirers for c in world.children(h)]
        assert len(hired) == 1
        assert world.quota_held() == Decimal("0.6")
        errors = sorted(world.error(h) for h in hirers)
        assert errors[0] == ("", "")
        assert errors[1][0] == "LIMIT_EXCEEDED"
        assert "monthly cost quota" in errors[1][1]
        world.advance_all()
        assert world.quota_held() == 0


def _month_spent(workspace: Workspace) -> Decimal:
    since = month_start(timezone.now())
    roots = Run.objects.filter(workspace=workspace, parent__isnull=True, created_at__gte=since)
    return roots.aggregate(total=Sum("total_cost_usd"))["total"] or Decimal(0)


@pytest.mark.django_db
def test_the_quota_check_costs_a_hires_spawn_one_statement(acme):
    world = OrmWorld(acme)
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Analyst", "Count the widgets", 0.2))
    world.set_monthly_cost_quota(Decimal("10"))
    run = world.start("coordinator", {})

    with CaptureQueriesContext(connection) as spawn:
        world.advance(world.queue.pop(0))

    assert world.status(run) == "WAITING", world.error(run)
    table = Workspace._meta.db_table
    (checked,) = [q["sql"] for q in spawn.captured_queries if table in q["sql"]]
    assert checked.startswith("UPDATE")  # the check and the hold, in one statement
    assert world.quota_held() == Decimal("0.2")


# -- firing by a limit, and by the hirer's end ---------------------------------------------


def nested_hirers(world: World, **coordinator: Any) -> None:
    """coordinator hires a manager, which hires a specialist."""
    specialist(world)
    hirer(world, "manager", hire_step(1, "Lead", "Lead the count", template="specialist"))
    hirer(
        world,
        "coordinator",
        hire_step(1, "Manager", "Manage the count", template="manager"),
        templates=("manager",),
        **coordinator,
    )


def start_nested(world: World) -> tuple[str, str, str]:
    """The three runs, the coordinator and the manager each waiting on their hire."""
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))
    (manager,) = world.children(run)
    world.queue.remove(manager)
    world.advance(manager)
    (lead,) = world.children(manager)
    world.queue.remove(lead)
    assert (world.status(run), world.status(manager)) == ("WAITING", "WAITING")
    return run, manager, lead


def test_a_hirer_past_its_time_limit_fires_its_hires_and_cancels_theirs(world):
    nested_hirers(world, governance={"execution_limits": {"timeout_ms": 60_000}})
    run, manager, lead = start_nested(world)

    world.let_time_pass(120)
    world.advance(run)  # the coordinator finds its deadline passed
    world.advance_all()

    assert world.error(run)[0] == "TIMEOUT"
    assert world.status(manager) == "CANCELLED"
    record = world.hire_record(manager)
    assert record["fired_by"] == "limit"
    assert record["fired_reason"] == (
        "its hirer coordinator passed its time limit (timeout_ms 60000, or an ancestor's)"
    )
    assert world.events_of(manager, "run.fired") == [
        {"reason": record["fired_reason"], "by": "limit"}
    ]
    # Deeper down: cancelled with its hirer, not fired (its hirer was fired).
    assert world.status(lead) == "CANCELLED"
    assert world.hire_record(lead)["fired_reason"] is None
    assert world.events_of(lead, "run.fired") == []


def test_a_cancelled_hirer_fires_its_unfinished_hires(world):
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Writer", "Write it", 0.3), max_cost=1.0)
    run = world.start("coordinator", {})
    world.advance(world.queue.pop(0))
    (child,) = world.children(run)
    world.queue.clear()

    world.cancel(run)
    world.queue[:] = [run]
    world.advance_all()

    assert world.status(run) == "CANCELLED"
    assert world.status(child) == "CANCELLED"
    record = world.hire_record(child)
    assert (record["fired_reason"], record["fired_by"]) == (
        "its hirer coordinator was cancelled",
        "hirer",
    )
    assert world.budget(run)[1] == 0  # its budget is returned


def test_a_hirer_that_completes_fires_nobody(world):
    specialist(world)
    hirer(world, "coordinator", hire_step(1, "Writer", "Write it"))
    run = world.run("coordinator", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    assert world.hire_record(child)["fired_reason"] is None
    assert "run.fired" not in world.event_types(world.trace(run))


@pytest.mark.django_db
def test_a_firing_by_a_time_limit_is_audited(acme):
    world = OrmWorld(acme)
    nested_hirers(world, governance={"execution_limits": {"timeout_ms": 60_000}})
    run, manager, lead = start_nested(world)
    world.let_time_pass(120)
    world.advance(run)
    world.advance_all()

    (audit,) = AuditRecord.objects.filter(action=AuditAction.RUN_FIRED)
    assert audit.object_id == manager
    assert audit.after == {
        "reason": world.hire_record(manager)["fired_reason"],
        "by": "limit",
        "hired_by": run,
    }


@pytest.mark.parametrize(
    ("status", "code", "message", "fired"),
    [
        ("COMPLETED", "", "", None),
        (
            "FAILED",
            "TIMEOUT",
            "the run passed its deadline",
            (
                "its hirer coordinator passed its time limit (timeout_ms 60000, or an ancestor's)",
                "limit",
            ),
        ),
        (
            "FAILED",
            "LIMIT_EXCEEDED",
            "budget_exhausted: coordinator has spent $1",
            (
                "its hirer coordinator reached a limit: budget_exhausted: coordinator has spent $1",
                "limit",
            ),
        ),
        (
            "FAILED",
            "TOOL_FAILURE",
            "boom",
            ("its hirer coordinator ended FAILED: TOOL_FAILURE", "hirer"),
        ),
        (
            "CANCELLED",
            "CANCELLED",
            "the run was cancelled",
            ("its hirer coordinator was cancelled", "hirer"),
        ),
    ],
)
def test_why_a_hirers_end_fires_its_hires(status, code, message, fired):
    definition = factory_definition(
        "coordinator", "AGENT", governance={"execution_limits": {"timeout_ms": 60_000}}
    )
    run = RunView(
        id="r",
        trace_id="r",
        workspace_id=1,
        definition=definition,
        status="RUNNING",
        input={},
        state={hiring.HIRES_KEY: 1},
        plan=None,
        cursor=0,
        iteration=1,
        depth=0,
        parent_id=None,
    ).ended(status, code, message)

    assert hiring.fired_with(run) == fired
    assert hiring.fired_with(run.without_state(hiring.HIRES_KEY)) is None  # it hired nobody
