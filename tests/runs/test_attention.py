"""A run that waits on a person says so on its root: a leaf blocked on its budget under a
three-level tree is named, with where to raise it, by the run document, the runs list, the
trace header, `run_entity --wait` (exit code 4) and a `run.needs_attention` webhook (once
per block)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from entities.models import Entity
from runs.attention import run_attention
from runs.models import Run, RunEvent, RunStatus, WebhookDelivery, WebhookStatus
from runs.selectors import run_document
from runs.services import run_raise_budget, run_start
from runs.webhooks import webhook_attention_schedule, webhook_deliver
from tests.factories import UserFactory, grant
from tests.support.attention import budget_tree
from tests.support.queued_runs import Driver
from tests.support.webhooks import Receiver


@pytest.fixture
def olga(acme):
    return grant(UserFactory(username="olga"), acme, "operator")


def blocked_tree(acme, *, webhook_url: str = "", driver: Driver | None = None) -> Run:
    driver = driver or Driver()
    with transaction.atomic():
        entity = Entity.objects.filter(workspace=acme, name="launch").first()
        root = run_start(entity=entity or budget_tree(acme), input_data={})
        if webhook_url:
            Run.objects.filter(pk=root.pk).update(webhook_url=webhook_url)
    driver.queue.append(str(root.pk))
    driver.drain()
    root.refresh_from_db()
    return root


def the_leaf(root: Run) -> Run:
    return Run.objects.get(trace_id=root.trace_id, entity__name="writer")


def test_the_run_document_names_the_blocked_leaf_and_the_raise_budget_call(acme):
    root = blocked_tree(acme)
    leaf = the_leaf(root)
    assert (root.status, leaf.status, leaf.error_code) == ("WAITING", "BLOCKED", "BUDGET_EXHAUSTED")

    (item,) = run_document(root)["needs_attention"]

    assert item["run_id"] == str(leaf.pk) and item["entity_name"] == "writer"
    assert item["status"] == "BLOCKED"
    assert item["reason"] == {"code": "BUDGET_EXHAUSTED", "message": leaf.error_message}
    assert item["console_url"].endswith(f"/runs/{leaf.pk}/")
    api = item["action"]["api"]
    assert (api["method"], api["path"]) == ("POST", f"/api/v1/runs/{leaf.pk}/raise-budget")
    assert item["action"]["console_url"].endswith(f"/admin/runs/run/{leaf.pk}/raise-budget/")


def test_a_run_with_nothing_waiting_has_an_empty_list(acme):
    root = blocked_tree(acme)
    Run.objects.filter(trace_id=root.trace_id).update(status=RunStatus.COMPLETED)
    root.refresh_from_db()
    assert run_document(root)["needs_attention"] == []


def test_a_block_of_another_reason_points_at_the_trace_page(acme):
    root = blocked_tree(acme)
    leaf = the_leaf(root)
    Run.objects.filter(pk=leaf.pk).update(error_code="LIMIT_EXCEEDED")

    (item,) = run_attention(root)

    assert item.code == "LIMIT_EXCEEDED"
    assert item.act.method is None
    assert item.act.console_url.endswith(f"/runs/{leaf.pk}/")


def test_the_middle_run_lists_the_leaf_below_it_but_a_sibling_branch_does_not(acme):
    root = blocked_tree(acme)
    middle = Run.objects.get(trace_id=root.trace_id, entity__name="planner")
    leaf = the_leaf(root)
    assert [item.run_id for item in run_attention(middle)] == [str(leaf.pk)]
    assert [item.run_id for item in run_attention(leaf)] == [str(leaf.pk)]


def test_reading_what_waits_is_one_query_however_many_wait(acme, django_assert_num_queries):
    root = blocked_tree(acme)
    Run.objects.filter(trace_id=root.trace_id).exclude(pk=root.pk).update(
        status=RunStatus.BLOCKED, error_code="BUDGET_EXHAUSTED"
    )
    with django_assert_num_queries(1):
        assert len(run_attention(root)) == 2


# -- the pages ---------------------------------------------------------------------------------


def test_the_runs_list_shows_needs_attention_linking_to_the_leaf(client, alice, acme):
    root = blocked_tree(acme)
    leaf = the_leaf(root)
    client.force_login(alice)

    html = client.get("/runs/").content.decode()

    row = html[html.index(f'id="run-{root.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "Needs attention" in row
    assert f'href="/runs/{leaf.pk}/"' in row


def test_the_runs_list_shows_no_badge_when_nothing_waits(client, alice, acme):
    root = blocked_tree(acme)
    Run.objects.filter(trace_id=root.trace_id).update(status=RunStatus.COMPLETED)
    client.force_login(alice)
    assert "Needs attention" not in client.get("/runs/").content.decode()


def test_the_runs_list_costs_the_same_queries_for_one_waiting_root_or_three(client, alice, acme):
    blocked_tree(acme)
    client.force_login(alice)
    client.get("/runs/")  # warm: sessions, permissions
    one = _list_queries(client)
    blocked_tree(acme)
    blocked_tree(acme)

    assert _list_queries(client) == one
    assert client.get("/runs/").content.decode().count("Needs attention") == 3


def _list_queries(client) -> int:
    with CaptureQueriesContext(connection) as done:
        assert client.get("/runs/").status_code == 200
    return len(done)


def test_the_trace_header_says_what_waits_and_where_escaped(client, alice, acme):
    root = blocked_tree(acme)
    leaf = the_leaf(root)
    Run.objects.filter(pk=leaf.pk).update(error_message="<script>alert(1)</script> over budget")
    client.force_login(alice)

    html = client.get(f"/runs/{root.pk}/").content.decode()

    head = html[html.index('id="trace-head"') :]
    head = head[: head.index('id="trace-attention"') + 2000]
    assert "Needs attention" in head
    assert f'href="/runs/{leaf.pk}/"' in head
    assert "BUDGET_EXHAUSTED" in head
    assert f"/admin/runs/run/{leaf.pk}/raise-budget/" in head
    assert "&lt;script&gt;alert(1)&lt;/script&gt; over budget" in head
    assert "<script>alert(1)" not in html


def test_a_run_of_another_workspace_is_never_shown(client, charlie, acme):
    root = blocked_tree(acme)
    client.force_login(charlie)
    assert client.get(f"/runs/{root.pk}/").status_code == 404
    assert "Needs attention" not in client.get("/runs/").content.decode()


# -- run_entity --wait ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_entity_wait_returns_with_what_to_do_and_exit_code_4(acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    budget_tree(acme)
    out = StringIO()

    with pytest.raises(CommandError) as stopped:
        call_command("run_entity", "launch", "--workspace", "acme", "--wait", stdout=out)

    assert stopped.value.returncode == 4
    assert "BUDGET_EXHAUSTED" in str(stopped.value)
    printed = json.loads(out.getvalue())
    leaf = Run.objects.get(entity__name="writer")
    (item,) = printed["needs_attention"]
    assert item["run_id"] == str(leaf.pk)
    assert item["action"]["api"]["path"] == f"/api/v1/runs/{leaf.pk}/raise-budget"
    assert "waits_on_a_person" not in printed


# -- the webhook -----------------------------------------------------------------------------


@pytest.fixture
def allow_private(settings):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": True}


def test_a_block_fires_the_webhook_once_and_a_second_block_again(acme, olga, allow_private):
    driver = Driver()
    with Receiver() as receiver:
        root = blocked_tree(acme, webhook_url=receiver.url, driver=driver)
        leaf = the_leaf(root)
        (delivery,) = WebhookDelivery.objects.filter(run=root)
        assert delivery.event == "run.needs_attention"

        # Asked again for the same block (a replay): nothing new.
        with transaction.atomic():
            assert webhook_attention_schedule(trace_id=str(root.pk), run_id=str(leaf.pk)) is None
        webhook_deliver(delivery_pk=delivery.pk)

        # Raised a little, it runs again and blocks again: a new block, told again.
        leaf.refresh_from_db()
        driver.queue.extend(run_raise_budget(run=leaf, budget_usd="0.0000015", user=olga))
        driver.drain()
        leaf.refresh_from_db()
        assert leaf.status == "BLOCKED", leaf.error_message
        first, second = WebhookDelivery.objects.filter(run=root).order_by("created_at", "pk")
        assert second.delivery_id != first.delivery_id
        webhook_deliver(delivery_pk=second.pk)

    delivered = WebhookDelivery.objects.filter(run=root, status=WebhookStatus.DELIVERED)
    assert delivered.count() == 2
    assert [h["X-Hierarch-Event"] for h, _ in receiver.requests] == ["run.needs_attention"] * 2
    body = json.loads(receiver.requests[0][1])
    assert body["run_id"] == str(root.pk)
    assert [item["run_id"] for item in body["needs_attention"]] == [str(leaf.pk)]
    blocks = RunEvent.objects.filter(run=leaf, type="run.status", payload__status="BLOCKED")
    assert blocks.count() == 2


def test_a_block_without_a_webhook_url_sends_nothing(acme):
    root = blocked_tree(acme)
    assert not WebhookDelivery.objects.filter(run=root).exists()
