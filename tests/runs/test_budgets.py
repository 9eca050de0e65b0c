"""Budgets and deadlines on the ORM store: a blocked run resumes when its budget is raised,
a raise never outgrows the budget it is drawn from, bad raises are refused with nothing
changed, and the sweeper finds a run past its deadline."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from governance.models import AuditRecord
from runs import sweeper
from runs.models import Run, RunEvent
from runs.services import RunRefused, run_raise_budget, run_start
from runs.sweeper import sweep
from tests.factories import EntityFactory, UserFactory, grant
from tests.support.queued_runs import Driver
from tests.support.runs import io

pytestmark = pytest.mark.smoke


@pytest.fixture
def driver(db):
    return Driver()


@pytest.fixture
def operator(acme):
    return grant(UserFactory(username="olga"), acme, "operator")


def test_raising_a_blocked_runs_budget_resumes_it_and_it_completes(driver, acme, operator):
    entity = EntityFactory(workspace=acme, name="pricey", io_contract=io(answer="string"))
    entity_run = driver.run(entity, {})  # no max_cost_usd: it completes
    assert entity_run.status == "COMPLETED"

    capped = EntityFactory(
        workspace=acme, name="capped", io_contract=io(answer="string"), max_cost=0.000001
    )
    run = driver.run(capped, {})
    assert (run.status, run.error_code) == ("BLOCKED", "BUDGET_EXHAUSTED")
    assert run.llm_calls == 0

    resumed = run_raise_budget(run=run, budget_usd="0.05", user=operator)
    assert resumed == [str(run.pk)]
    driver.queue.extend(resumed)
    driver.drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED", run.error_message
    assert run.budget_usd == Decimal("0.05")
    assert run.reserved_usd == 0
    assert 0 < run.total_cost_usd <= Decimal("0.05")
    statuses = [
        e.payload.get("status") for e in RunEvent.objects.filter(run=run, type="run.status")
    ]
    assert statuses == ["RUNNING", "BLOCKED", "RUNNING", "COMPLETED"]
    record = AuditRecord.objects.get(action="run.budget_raised")
    assert record.actor_id == operator.pk
    assert record.before == {"budget_usd": "0.000001"}


def test_a_childs_raise_must_fit_the_budget_it_is_drawn_from(driver, acme, operator):
    child = EntityFactory(
        workspace=acme, name="kid", io_contract=io(ok="boolean"), max_cost=0.000001
    )
    parent = EntityFactory(
        workspace=acme, name="mum", type="AGENT", children=[child], max_cost=0.01
    )
    run = driver.run(parent, {})
    kid = Run.objects.get(parent=run)
    assert (run.status, kid.status, kid.error_code) == ("WAITING", "BLOCKED", "BUDGET_EXHAUSTED")

    with pytest.raises(RunRefused) as refused:
        run_raise_budget(run=kid, budget_usd="0.02", user=operator)
    assert refused.value.code == "BUDGET_EXHAUSTED"
    kid.refresh_from_db()
    run.refresh_from_db()
    assert kid.budget_usd == Decimal("0.000001")  # nothing changed
    assert run.reserved_usd == Decimal("0.000001")

    driver.queue.extend(run_raise_budget(run=kid, budget_usd="0.009", user=operator))
    driver.drain()
    run.refresh_from_db()
    kid.refresh_from_db()
    assert (run.status, kid.status) == ("COMPLETED", "COMPLETED")
    # The child's unused budget went back: the parent holds nothing for it any more.
    assert run.reserved_usd == 0
    assert run.total_cost_usd == kid.total_cost_usd > 0


@pytest.mark.parametrize(
    ("amount", "code", "words"),
    [
        ("lots", "INVALID_INPUT", "is not a number"),
        ("-1", "INVALID_INPUT", "must be a positive amount"),
        ("0", "INVALID_INPUT", "must be a positive amount"),
        ("NaN", "INVALID_INPUT", "must be a positive amount"),
    ],
)
def test_a_raise_that_is_not_a_positive_amount_is_refused(
    driver, acme, operator, amount, code, words
):
    capped = EntityFactory(workspace=acme, name="c", io_contract=io(a="string"), max_cost=1e-6)
    run = driver.run(capped, {})
    with pytest.raises(RunRefused) as refused:
        run_raise_budget(run=run, budget_usd=amount, user=operator)
    assert refused.value.code == code
    assert words in str(refused.value)
    run.refresh_from_db()
    assert (run.status, run.budget_usd) == ("BLOCKED", Decimal("0.000001"))


def test_only_an_operator_raises_a_budget_and_only_a_run_that_has_one(driver, acme, bob, operator):
    plain = EntityFactory(workspace=acme, name="plain", io_contract=io(a="string"))
    run = driver.run(plain, {})
    with pytest.raises(RunRefused) as refused:
        run_raise_budget(run=run, budget_usd="1", user=bob)  # a viewer
    assert refused.value.code == "PERMISSION_DENIED"
    with pytest.raises(RunRefused) as refused:
        run_raise_budget(run=run, budget_usd="1", user=operator)
    assert refused.value.code == "CONFLICT"  # this run has no budget of its own to raise


def test_the_sweeper_hands_on_a_waiting_run_past_its_deadline(driver, acme, monkeypatch):
    child = EntityFactory(workspace=acme, name="slow", io_contract=io(ok="boolean"))
    parent = EntityFactory(
        workspace=acme,
        name="rushed",
        type="AGENT",
        children=[child],
        governance={"execution_limits": {"max_recursion_depth": 5, "timeout_ms": 60_000}},
    )
    run = run_start(entity=parent, input_data={})
    driver.engine.advance(str(run.pk))  # starts the child; nobody runs it
    run.refresh_from_db()
    assert run.status == "WAITING"
    assert run.deadline_at is not None
    assert run.deadline_at - run.started_at == timedelta(seconds=60)
    hinted: list[str] = []
    monkeypatch.setattr(sweeper, "enqueue", hinted.append)  # the executor's hint, observed
    sweep()
    assert str(run.pk) not in hinted

    Run.objects.filter(pk=run.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    sweep()
    assert str(run.pk) in hinted
    driver.engine.advance(str(run.pk))
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("FAILED", "TIMEOUT")
    assert Run.objects.get(parent=run).cancel_requested


@pytest.mark.django_db(transaction=True)  # outside a test's transaction: sent as in production
def test_children_with_budgets_of_their_own_run_to_the_end_under_a_parents_budget(acme):
    """Each child's budget is set aside at the parent's when it starts, in the transaction
    that starts it (all at once, sent whole where the database allows), and what it did not
    use goes back when it ends: nothing is left set aside, and no budget is found short."""
    kids = [
        EntityFactory(workspace=acme, name=f"kid{i}", io_contract=io(ok="boolean"), max_cost=0.05)
        for i in range(3)
    ]
    limits = {"max_recursion_depth": 5, "max_llm_calls": 10, "max_tool_calls": 10}
    parent = EntityFactory(
        workspace=acme,
        name="mum",
        type="AGENT",
        children=kids,
        max_cost=1,
        governance={"cost_controls": {"max_cost_usd": 1}, "execution_limits": limits},
    )

    run = Driver().run(parent, {})

    assert run.status == "COMPLETED", run.error_message
    children = list(Run.objects.filter(parent=run))
    assert [c.status for c in children] == ["COMPLETED"] * 3
    assert all(c.budget_usd == Decimal("0.05") and c.reserved_usd == 0 for c in children)
    assert run.reserved_usd == 0
    assert run.total_cost_usd == sum(c.total_cost_usd for c in children) > 0
    assert run.llm_calls == sum(c.llm_calls for c in children) >= 3


@pytest.mark.django_db(transaction=True)
def test_a_call_limit_reached_under_a_parent_stops_the_child_that_reaches_it(acme):
    kids = [
        EntityFactory(workspace=acme, name=f"kid{i}", io_contract=io(ok="boolean"))
        for i in range(3)
    ]
    limits = {"max_recursion_depth": 5, "max_llm_calls": 1}
    parent = EntityFactory(
        workspace=acme,
        name="mum",
        type="AGENT",
        children=kids,
        governance={"execution_limits": limits},
    )

    run = Driver().run(parent, {})

    first, second = Run.objects.filter(parent=run).order_by("created_at")
    assert (first.status, first.llm_calls) == ("COMPLETED", 1)
    assert (second.status, second.error_code) == ("FAILED", "LIMIT_EXCEEDED")
    assert (second.llm_calls, second.reserved_usd) == (0, 0)  # refused: nothing counted
    assert (run.status, run.error_code, run.llm_calls) == ("FAILED", "LIMIT_EXCEEDED", 1)
    assert not Run.objects.filter(parent=run, entity__name="kid2").exists()  # never started
