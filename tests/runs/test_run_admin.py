"""Runs in the admin: read-only, and scoped to the user's workspaces."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import LLMCall, Run, WebhookDelivery
from tests.factories import EntityFactory
from tests.support.checkpoints import tool_entity
from tests.support.queued_runs import Driver
from tests.support.runs import io

pytestmark = pytest.mark.smoke


@pytest.fixture
def finished_run(db, acme):
    child = EntityFactory(workspace=acme, name="helper", io_contract=io(None, ok="boolean"))
    parent = EntityFactory(workspace=acme, name="lead", type="AGENT", children=[child])
    return Driver().run(parent, {})


def test_a_member_sees_the_run_its_steps_and_children(client, alice, finished_run):
    client.force_login(alice)
    page = client.get(reverse("admin:runs_run_change", args=[finished_run.pk]))
    assert page.status_code == 200
    assert b"helper" in page.content
    assert b"COMPLETED" in page.content
    listing = client.get(reverse("admin:runs_llmcall_changelist"))
    assert listing.status_code == 200
    assert LLMCall.objects.filter(run__trace_id=finished_run.trace_id).exists()


def test_an_outsider_sees_no_run_of_another_workspace(client, charlie, finished_run):
    client.force_login(charlie)
    listing = client.get(reverse("admin:runs_run_changelist"))
    assert listing.status_code == 200
    assert str(finished_run.pk).encode() not in listing.content
    page = client.get(reverse("admin:runs_run_change", args=[finished_run.pk]))
    assert page.status_code in (302, 404)
    assert b"lead" not in page.content


def test_runs_cannot_be_edited_or_deleted_in_the_admin(client, alice, finished_run):
    client.force_login(alice)
    url = reverse("admin:runs_run_delete", args=[finished_run.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Run.objects.filter(pk=finished_run.pk).exists()


def test_what_a_model_or_tool_produced_is_shown_escaped(client, alice, finished_run):
    Run.objects.filter(pk=finished_run.pk).update(
        output_data={"answer": "<script>alert('x')</script>"},
        state={"note": "<img src=x onerror=alert(1)>"},
    )
    client.force_login(alice)
    page = client.get(reverse("admin:runs_run_change", args=[finished_run.pk])).content.decode()
    assert "<script>alert('x')</script>" not in page
    assert "&lt;script&gt;" in page
    assert "<img src=x" not in page


def test_an_operator_raises_a_blocked_runs_budget_from_the_admin(client, acme, charlie):
    from tests.factories import UserFactory, grant

    olga = grant(UserFactory(username="olga", is_staff=True), acme, "operator")
    capped = EntityFactory(
        workspace=acme, name="capped", io_contract=io(None, a="string"), max_cost=1e-6
    )
    driver = Driver()
    run = driver.run(capped, {})
    assert run.status == "BLOCKED"
    client.force_login(olga)
    page = client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    url = reverse("admin:runs_run_raise_budget", args=[run.pk])
    assert url in page

    refused = client.post(url, {"budget_usd": "nonsense"})
    assert refused.status_code == 200
    assert "budget_usd &#x27;nonsense&#x27; is not a number" in refused.content.decode()
    assert "Nothing was changed." in refused.content.decode()

    done = client.post(url, {"budget_usd": "0.05"})
    assert done.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.budget_usd) == ("RUNNING", Decimal("0.05"))

    client.force_login(charlie)  # another workspace: not found
    assert client.get(url).status_code == 404


def test_the_run_page_shows_its_requests_to_people_and_their_decisions(client, alice, acme, dave):
    from approvals.models import Approval
    from approvals.services import approval_decide

    run = Driver().run(tool_entity(acme, {"trigger": "BEFORE_TOOL_CALL"}), {})
    request = Approval.objects.get(run=run)
    approval_decide(approval=request, user=dave, decision="reject", notes="<b>not now</b>")
    client.force_login(alice)
    page = client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    assert "requests to people" in page.lower()
    assert f'href="/approvals/{request.pk}/"' in page
    assert "before tool call" in page.lower() and "reject" in page.lower()
    assert "&lt;b&gt;not now&lt;/b&gt;" in page


def test_the_run_page_lists_its_webhook_deliveries_without_the_urls_query(
    client, alice, finished_run
):
    WebhookDelivery.objects.create(
        delivery_id=uuid.uuid4(),
        run=finished_run,
        url="https://hooks.example.com/hierarch?token=s3cr3t-in-the-query",
        event="run.completed",
        status="FAILED",
        status_code=503,
        error="hooks.example.com answered 503",
        due_at=timezone.now(),
    )
    client.force_login(alice)

    page = client.get(reverse("admin:runs_run_change", args=[finished_run.pk])).content.decode()

    assert "webhook deliveries" in page.lower()
    assert "https://hooks.example.com/hierarch" in page
    assert "503" in page
    assert "s3cr3t-in-the-query" not in page


def test_the_run_page_leads_to_the_live_trace(client, alice, finished_run):
    client.force_login(alice)

    page = client.get(reverse("admin:runs_run_change", args=[finished_run.pk])).content.decode()

    assert f'href="/runs/{finished_run.pk}/"' in page


def test_a_budget_past_what_the_column_holds_is_refused_and_nothing_changes(client, acme):
    from tests.factories import UserFactory, grant

    olga = grant(UserFactory(username="olga", is_staff=True), acme, "operator")
    capped = EntityFactory(
        workspace=acme, name="capped", io_contract=io(None, a="string"), max_cost=1e-6
    )
    run = Driver().run(capped, {})
    before = (run.status, run.budget_usd)
    client.force_login(olga)
    url = reverse("admin:runs_run_raise_budget", args=[run.pk])

    for amount in ("1e30", "100000000", "1e999999"):
        refused = client.post(url, {"budget_usd": amount})
        assert refused.status_code == 200, amount
        assert "budget_usd may be at most $10,000,000" in refused.content.decode(), amount
        run.refresh_from_db()
        assert (run.status, run.budget_usd) == before
