"""The inbox page: what each person sees, the filters, the sort, the badge."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from tests.factories import EntityFactory, UserFactory, approval_request, grant, paused_run

pytestmark = pytest.mark.smoke

INBOX = reverse("approvals:inbox")
RESULTS = reverse("approvals:inbox_results")
HTMX = {"HX-Request": "true"}


def row_ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr id="approval-(\d+)"', response.content.decode())]


def test_it_lists_the_requests_an_approver_may_decide(client, dave, asked, asked_globex):
    client.force_login(dave)
    response = client.get(INBOX)
    assert response.status_code == 200
    assert row_ids(response) == [asked.pk]
    page = response.content.decode()
    assert "researcher" in page
    assert "Before Tool Call" in page
    assert "search" in page
    assert "The agent wants to search the web" in page
    assert "mailer" not in page


def test_it_shows_each_approver_only_their_workspace(client, erin, asked, asked_globex):
    client.force_login(erin)
    assert row_ids(client.get(INBOX)) == [asked_globex.pk]


def test_it_shows_a_viewer_nothing_to_decide(client, bob, asked):
    client.force_login(bob)
    response = client.get(INBOX)
    assert row_ids(response) == []
    assert "Nothing is waiting for you." in response.content.decode()


def test_it_leaves_decided_requests_out_and_shows_them_under_decided(client, dave, acme_run):
    waiting = approval_request(acme_run)
    done = approval_request(
        acme_run, status=ApprovalStatus.APPROVED, decision="approve", responded_at=timezone.now()
    )
    client.force_login(dave)
    assert row_ids(client.get(INBOX)) == [waiting.pk]
    history = client.get(INBOX, {"show": "decided"})
    assert row_ids(history) == [done.pk]
    assert "Approve" in history.content.decode()


def test_it_shows_the_decided_history_to_a_viewer(client, bob, acme_run):
    done = approval_request(acme_run, status=ApprovalStatus.REJECTED, decision="reject")
    client.force_login(bob)
    assert row_ids(client.get(INBOX, {"show": "decided"})) == [done.pk]


def test_it_sends_anonymous_visitors_to_sign_in(client, asked):
    response = client.get(INBOX)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


class TestFilters:
    @pytest.fixture
    def requests(self, acme, globex, acme_run, globex_run):
        writer = paused_run(EntityFactory(workspace=acme, name="writer"))
        return {
            "acme_tool": approval_request(acme_run, risk_level="high", risk_rank=2),
            "acme_plan": approval_request(
                writer, key="AFTER_PLANNING:1", checkpoint_trigger="AFTER_PLANNING"
            ),
            "globex_tool": approval_request(globex_run, risk_level="critical", risk_rank=3),
        }

    def test_it_filters_by_workspace(self, client, root, acme, requests):
        client.force_login(root)
        ids = row_ids(client.get(INBOX, {"workspace": acme.pk}))
        assert sorted(ids) == sorted([requests["acme_tool"].pk, requests["acme_plan"].pk])

    def test_it_filters_by_entity(self, client, root, researcher, requests):
        client.force_login(root)
        assert row_ids(client.get(INBOX, {"entity": researcher.pk})) == [requests["acme_tool"].pk]

    def test_it_filters_by_trigger(self, client, root, requests):
        client.force_login(root)
        ids = row_ids(client.get(INBOX, {"trigger": "AFTER_PLANNING"}))
        assert ids == [requests["acme_plan"].pk]

    def test_it_filters_by_risk(self, client, root, requests):
        client.force_login(root)
        assert row_ids(client.get(INBOX, {"risk": "critical"})) == [requests["globex_tool"].pk]

    def test_it_says_when_nothing_matches(self, client, root, requests):
        client.force_login(root)
        response = client.get(INBOX, {"risk": "low", "trigger": "ON_FAILURE"})
        assert row_ids(response) == []
        assert "No request matches these filters." in response.content.decode()

    def test_it_ignores_a_filter_naming_another_workspace(self, client, dave, globex, requests):
        client.force_login(dave)
        response = client.get(INBOX, {"workspace": globex.pk})
        assert response.status_code == 200
        assert sorted(row_ids(response)) == sorted(
            [requests["acme_tool"].pk, requests["acme_plan"].pk]
        )
        assert "Globex" not in response.content.decode()

    def test_it_serves_the_results_alone_and_points_the_address_bar_at_the_page(
        self, client, root, acme, requests
    ):
        client.force_login(root)
        response = client.get(RESULTS, {"workspace": acme.pk, "sort": "risk"}, headers=HTMX)
        page = response.content.decode()
        assert page.lstrip().startswith('<section id="inbox-results"')
        assert "<html" not in page
        assert response["HX-Push-Url"] == f"{INBOX}?workspace={acme.pk}&sort=risk&show=open"
        assert (
            f'ws-connect="/ws/approvals/?workspace={acme.pk}&amp;sort=risk&amp;list=open"' in page
        )


def test_it_sorts_newest_or_riskiest_first(client, dave, acme_run):
    now = timezone.now()
    old_risky = approval_request(acme_run, risk_level="high", risk_rank=2)
    new_calm = approval_request(acme_run)
    old_calm = approval_request(acme_run)
    for approval, minutes in ((old_risky, 30), (new_calm, 1), (old_calm, 20)):
        Approval.objects.filter(pk=approval.pk).update(
            requested_at=now - timedelta(minutes=minutes)
        )
    client.force_login(dave)
    assert row_ids(client.get(INBOX)) == [new_calm.pk, old_calm.pk, old_risky.pk]
    assert row_ids(client.get(INBOX, {"sort": "risk"})) == [old_risky.pk, new_calm.pk, old_calm.pk]


def test_it_reads_the_list_in_the_same_queries_however_long_it_is(client, root, acme_run):
    approval_request(acme_run)
    client.force_login(root)
    client.get(INBOX)  # warm the session and the content types
    with CaptureQueriesContext(connection) as one:
        client.get(INBOX)
    for _ in range(5):
        approval_request(paused_run(acme_run.entity))
    with CaptureQueriesContext(connection) as six:
        response = client.get(INBOX)
    assert len(row_ids(response)) == 6
    assert len(six) == len(one)


def test_it_counts_the_waiting_requests_in_the_badge(client, dave, asked, acme_run):
    approval_request(acme_run)
    approval_request(acme_run, status=ApprovalStatus.APPROVED)
    client.force_login(dave)
    page = client.get(INBOX).content.decode()
    assert re.search(r'<span id="inbox-badge" class="inbox-badge"[^>]*>2</span>', page)


def test_it_puts_the_inbox_and_its_live_badge_in_the_admin(client, dave, asked):
    client.force_login(dave)
    page = client.get(reverse("admin:index")).content.decode()
    assert f'href="{INBOX}"' in page
    assert re.search(r'<span id="inbox-badge"[^>]*>1</span>', page)
    assert 'ws-connect="/ws/approvals/"' in page
    assert "hierarch/vendor/htmx-2.0.11.min.js" in page


def test_it_opens_one_socket_on_the_inbox_page(client, dave, asked):
    client.force_login(dave)
    page = client.get(INBOX).content.decode()
    # The results' socket updates the badge too.
    assert page.count("ws-connect=") == 1
    assert 'ws-connect="/ws/approvals/?list=open"' in page


def test_it_hands_an_escalated_request_to_the_workspaces_admins(client, dave, acme, acme_run):
    escalated = approval_request(acme_run, status=ApprovalStatus.ESCALATED)
    admin = grant(UserFactory(username="ada"), acme, "admin")
    client.force_login(dave)
    assert row_ids(client.get(INBOX)) == []
    page = client.get(reverse("approvals:detail", args=[escalated.pk])).content.decode()
    assert "Waiting for an admin of Acme." in page
    client.force_login(admin)
    assert row_ids(client.get(INBOX)) == [escalated.pk]
    assert "escalated" in client.get(INBOX).content.decode()
