"""Hired subordinates in the API (runs/engine/hiring.py): each hired node of
GET /runs/{id}/trace and each hired child of GET /runs/{id} carries its role, task and
hired_reason; POST /runs/{id}/fire fires one (the operator role, a reason; 409 for a run
that was not hired or has ended, 404 across workspaces), and its hirer's step fails FIRED."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from governance.models import AuditAction, AuditRecord
from runs import services
from runs.models import Run, RunStatus
from runs.services import run_start
from tests.api.checks import error_of
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io, step
from tests.support.runs_api import operator

ROLE = "Market <b>researcher</b>"


@pytest.fixture
def olive(acme):
    return operator(acme)


def hiring_run(workspace: Any) -> tuple[Driver, Run, Run]:
    """A coordinator that hired one specialist and waits on it (the specialist not run yet)."""
    EntityFactory(
        workspace=workspace,
        name="specialist",
        type="SKILL",
        io_contract=io({"task": "string"}, answer="string"),
    )
    hire = {"role": ROLE, "task": "Size the EU market", "reason": "no data", "budget_usd": 0.2}
    coordinator = EntityFactory(
        workspace=workspace,
        name="coordinator",
        type="AGENT",
        max_cost=1.0,
        capabilities={"delegation": {"enabled": True, "templates": ["specialist"]}},
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [step(1, "Hire", "DELEGATE", entity_id="specialist", hire=hire)],
            }
        },
    )
    driver = Driver()
    handed_to = services.enqueue
    services.enqueue = driver.queue.append
    try:
        hirer = run_start(entity=coordinator, input_data={})
    finally:
        services.enqueue = handed_to
    driver.engine.advance(driver.queue.pop(0))
    hirer.refresh_from_db()
    assert hirer.status == RunStatus.WAITING, hirer.error_message
    return driver, hirer, hirer.children.get()


def fire(api, run: Run, body: Any):
    return api.post(f"/api/v1/runs/{run.pk}/fire", body, format="json")


def test_the_trace_and_the_run_document_show_each_hire(api, olive, acme):
    _, hirer, child = hiring_run(acme)
    api.force_login(olive)

    tree = api.get(f"/api/v1/runs/{hirer.pk}/trace").json()["trace_tree"]
    assert tree["node"]["role"] is None and tree["node"]["hired_reason"] is None
    node = tree["children"][0]["node"]
    assert node["run_id"] == str(child.pk)
    assert (node["role"], node["task"], node["hired_reason"]) == (
        ROLE,
        "Size the EU market",
        "no data",
    )
    assert node["fired_reason"] is None
    (shown,) = api.get(f"/api/v1/runs/{hirer.pk}").json()["child_runs"]
    assert (shown["role"], shown["task"], shown["hired_reason"]) == (
        ROLE,
        "Size the EU market",
        "no data",
    )
    hired = AuditRecord.objects.get(action=AuditAction.RUN_HIRED)
    assert hired.object_id == str(child.pk)
    assert hired.after["role"] == ROLE


def test_an_operator_fires_a_subordinate_and_its_hirers_step_fails(api, olive, acme):
    driver, hirer, child = hiring_run(acme)
    api.force_login(olive)

    response = fire(api, child, {"reason": "off topic"})

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["run_id"] == str(child.pk)
    assert (body["fired_reason"], body["fired_by"], body["runs"]) == (
        "off topic",
        "operator olive",
        1,
    )
    assert AuditRecord.objects.filter(action=AuditAction.RUN_FIRED, object_id=str(child.pk))
    driver.queue.append(str(child.pk))
    driver.drain()
    child.refresh_from_db()
    hirer.refresh_from_db()
    assert child.status == RunStatus.CANCELLED
    assert hirer.status == RunStatus.FAILED
    assert hirer.error_code == "FIRED"
    assert "off topic" in hirer.error_message
    assert hirer.reserved_usd == 0  # its budget came back
    node = api.get(f"/api/v1/runs/{hirer.pk}/trace").json()["trace_tree"]["children"][0]
    assert node["node"]["fired_reason"] == "off topic"
    # Fired already: it cannot be fired again.
    error_of(fire(api, child, {"reason": "again"}), 409, "CONFLICT")


def test_a_run_that_was_not_hired_or_has_ended_is_a_conflict(api, olive, acme):
    _, hirer, child = hiring_run(acme)
    api.force_login(olive)
    body = error_of(fire(api, hirer, {"reason": "x"}), 409, "CONFLICT")
    assert "not hired" in body["error"]["message"]
    Run.objects.filter(pk=child.pk).update(status=RunStatus.COMPLETED)
    body = error_of(fire(api, child, {"reason": "x"}), 409, "CONFLICT")
    assert "completed already" in body["error"]["message"]


def test_the_fire_body_is_checked(api, olive, acme):
    _, _, child = hiring_run(acme)
    api.force_login(olive)
    body = error_of(fire(api, child, {}), 400, "VALIDATION_ERROR")
    assert "reason" in body["error"]["details"]
    body = error_of(fire(api, child, {"reason": "x", "by": "me"}), 400, "VALIDATION_ERROR")
    assert "by" in body["error"]["details"]
    error_of(fire(api, child, {"reason": "x" * 1001}), 400, "VALIDATION_ERROR")
    child.refresh_from_db()
    assert child.fired_reason is None


def test_a_viewer_may_not_fire_and_another_workspace_does_not_see_the_run(api, bob, charlie, acme):
    _, _, child = hiring_run(acme)
    api.force_login(bob)
    error_of(fire(api, child, {"reason": "x"}), 403, "PERMISSION_DENIED")
    api.force_login(charlie)
    error_of(fire(api, child, {"reason": "x"}), 404, "NOT_FOUND")
    child.refresh_from_db()
    assert child.fired_reason is None and not child.cancel_requested


def test_the_trace_page_shows_the_hire_escaped(client, olive, acme):
    _, hirer, child = hiring_run(acme)
    client.force_login(olive)
    page = client.get(reverse("runs:trace_node", args=[hirer.trace_id, child.pk]))
    assert page.status_code == 200, page.content[:300]
    text = page.content.decode()
    assert "Market &lt;b&gt;researcher&lt;/b&gt;" in text
    assert "<b>researcher</b>" not in text
    assert "Size the EU market" in text
    assert reverse("runs:fire", args=[child.pk]) in text
    tree = client.get(reverse("runs:detail", args=[hirer.pk])).content.decode()
    assert "hired as Market &lt;b&gt;researcher&lt;/b&gt;" in tree


def test_a_hirer_cancelled_through_the_api_fires_its_hire_and_the_api_shows_it(api, olive, acme):
    driver, hirer, child = hiring_run(acme)
    api.force_login(olive)

    response = api.post(f"/api/v1/runs/{hirer.pk}/cancel")
    assert response.status_code == 202, response.content
    driver.queue[:] = [str(hirer.pk)]  # the hirer ends first, its hire still running
    driver.drain()

    child.refresh_from_db()
    assert child.status == RunStatus.CANCELLED
    assert (child.fired_reason, child.fired_by) == ("its hirer coordinator was cancelled", "hirer")
    fired = AuditRecord.objects.get(action=AuditAction.RUN_FIRED, object_id=str(child.pk))
    assert fired.after["by"] == "hirer"
    node = api.get(f"/api/v1/runs/{hirer.pk}/trace").json()["trace_tree"]["children"][0]["node"]
    assert (node["fired_reason"], node["fired_by"]) == (child.fired_reason, "hirer")
    (shown,) = api.get(f"/api/v1/runs/{hirer.pk}").json()["child_runs"]
    assert (shown["status"], shown["fired_reason"], shown["fired_by"]) == (
        "CANCELLED",
        child.fired_reason,
        "hirer",
    )
