"""Deciding from the inbox list: one row or several at once, each through approval_decide; a
plain form asks on a confirmation page first, the page's dialog posts confirmed; a rejection
needs its reason; each request says what came of it; another workspace's request is not
found and a viewer decides nothing."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from governance.models import AuditAction, AuditRecord
from runs.models import Run, RunStatus
from tests.factories import approval_request

pytestmark = pytest.mark.smoke

DECIDE = reverse("approvals:inbox_decide")
INBOX = reverse("approvals:inbox")
HTMX = {"HX-Request": "true"}


def fresh(approval) -> Approval:
    return Approval.objects.get(pk=approval.pk)


def confirmed(decision: str, *approvals, reason: str = "", **extra) -> dict:
    return {
        "decision": decision,
        "ids": [getattr(a, "pk", a) for a in approvals],
        "confirmed": "1",
        "reason": reason,
        **extra,
    }


@pytest.fixture
def second(acme_run):
    return approval_request(acme_run, step_name="publish")


def test_the_open_list_offers_approve_and_reject_on_each_row_and_a_bulk_bar(client, dave, asked):
    client.force_login(dave)
    page = client.get(INBOX).content.decode()
    row = page[page.index(f'<tr id="approval-{asked.pk}"') :]
    row = row[: row.index("</tr>")]
    assert f'name="one" value="approve:{asked.pk}"' in row
    assert f'name="one" value="reject:{asked.pk}"' in row
    assert f'name="ids" value="{asked.pk}" form="inbox-bulk"' in row
    assert 'id="inbox-bulk"' in page and 'action="/approvals/decide/"' in page
    assert "Approve selected" in page and "Reject selected" in page
    assert "Keyboard: <kbd>j</kbd>/<kbd>k</kbd>" in page
    assert 'id="decide-dialog"' in page


def test_the_decided_list_has_no_decision_controls(client, dave, asked):
    approval_decide(approval=asked, user=dave, decision="approve")
    client.force_login(dave)
    page = client.get(INBOX, {"show": "decided"}).content.decode()
    assert f'<tr id="approval-{asked.pk}"' in page
    assert 'name="one"' not in page and "decide-dialog" not in page


def test_a_row_button_without_a_script_asks_on_a_confirmation_page_first(client, dave, asked):
    client.force_login(dave)
    response = client.post(DECIDE, {"one": f"approve:{asked.pk}", "q": "sort=risk"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Approve 1 request?" in page
    assert f'<input type="hidden" name="ids" value="{asked.pk}">' in page
    assert '<input type="hidden" name="confirmed" value="1">' in page
    assert '<input type="hidden" name="q" value="sort=risk">' in page
    assert "csrfmiddlewaretoken" in page
    assert fresh(asked).status == ApprovalStatus.PENDING  # nothing decided yet


def test_a_rejection_asks_for_its_reason_on_the_confirmation_page(client, dave, asked):
    client.force_login(dave)
    page = client.post(DECIDE, {"one": f"reject:{asked.pk}"}).content.decode()
    assert "Reject 1 request?" in page
    assert re.search(
        r'<textarea id="id_reason" name="reason" rows="3" maxlength="5000" required', page
    )

    refused = client.post(DECIDE, confirmed("reject", asked, reason="   "))
    assert refused.status_code == 422
    assert "Say why you reject it" in refused.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_a_confirmed_approval_is_decided_through_the_service(client, dave, asked):
    client.force_login(dave)
    response = client.post(DECIDE, confirmed("approve", asked))
    assert response.status_code == 200
    page = response.content.decode()
    assert "1 request decided." in page
    assert "approved" in page
    assert f'<tr id="approval-{asked.pk}"' not in page  # no longer waiting
    approval = fresh(asked)
    assert (approval.status, approval.decision, approval.responded_by) == (
        ApprovalStatus.APPROVED,
        "approve",
        dave,
    )
    assert Run.objects.get(pk=asked.run_id).status == RunStatus.RUNNING
    assert AuditRecord.objects.filter(
        action=AuditAction.APPROVAL_DECIDED, object_id=str(asked.pk)
    ).exists()


def test_a_confirmed_rejection_keeps_its_reason_and_shows_it(client, dave, asked):
    client.force_login(dave)
    client.post(DECIDE, confirmed("reject", asked, reason="  Not this client.  "))
    approval = fresh(asked)
    assert (approval.status, approval.reviewer_notes) == (
        ApprovalStatus.REJECTED,
        "Not this client.",
    )
    page = client.get(reverse("approvals:detail", args=[asked.pk])).content.decode()
    assert "Not this client." in page and "Feedback" in page


def test_several_are_approved_at_once_and_each_says_what_came_of_it(
    client, dave, root, asked, second, asked_globex
):
    approval_decide(approval=second, user=root, decision="reject", notes="no")
    client.force_login(dave)
    response = client.post(
        DECIDE, confirmed("approve", asked, second, asked_globex, 987654), headers=HTMX
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inbox-report"')
    assert "1 request decided, 3 not." in html
    outcomes = dict(re.findall(r'data-approval="(\d+)"><span [^>]*>([^<]+)</span>', html))
    assert outcomes == {
        str(asked.pk): "Decided",
        str(second.pk): "Already decided",
        str(asked_globex.pk): "Not found",  # another workspace's reads as none at all
        "987654": "Not found",
    }
    assert "already decided by root at" in html
    assert "mailer" not in html and "ceo@globex" not in html
    # The list and the badge follow in the same answer.
    assert '<div id="inbox-rows" hx-swap-oob="true">' in html
    assert 'id="inbox-badge" class="inbox-badge is-empty" hx-swap-oob="true"' in html
    assert fresh(asked).status == ApprovalStatus.APPROVED
    assert fresh(second).decision == "reject"
    assert fresh(asked_globex).status == ApprovalStatus.PENDING


def test_several_are_rejected_at_once_with_one_reason(client, dave, asked, second):
    client.force_login(dave)
    response = client.post(DECIDE, confirmed("reject", asked, second, reason="Wrong week."))
    assert "2 requests decided." in response.content.decode()
    for approval in (asked, second):
        assert (fresh(approval).status, fresh(approval).reviewer_notes) == (
            ApprovalStatus.REJECTED,
            "Wrong week.",
        )


def test_a_viewer_decides_nothing_from_the_list(client, bob, asked):
    client.force_login(bob)
    response = client.post(DECIDE, confirmed("approve", asked), headers=HTMX)
    html = response.content.decode()
    assert re.search(rf'data-approval="{asked.pk}"><span [^>]*>Not allowed</span>', html)
    assert "only an approver of Acme may decide this request" in html
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_another_workspaces_approver_cannot_decide_it(client, erin, asked):
    client.force_login(erin)
    html = client.post(DECIDE, confirmed("approve", asked)).content.decode()
    assert "Not found" in html
    assert "researcher" not in html  # nothing said of what it is
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_the_list_decides_only_approve_or_reject(client, dave, asked):
    client.force_login(dave)
    response = client.post(DECIDE, confirmed("edit", asked), headers=HTMX)
    assert response.status_code == 422
    assert "Select a valid choice" in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_nothing_picked_is_said_and_ids_that_are_not_numbers_are_refused(client, dave, asked):
    client.force_login(dave)
    empty = client.post(DECIDE, {"decision": "approve", "confirmed": "1"}, headers=HTMX)
    assert empty.status_code == 422
    assert "Pick at least one request." in empty.content.decode()
    bad = client.post(
        DECIDE, {"decision": "approve", "confirmed": "1", "ids": ["1\x00", "x"]}, headers=HTMX
    )
    assert bad.status_code == 422
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_a_reason_longer_than_the_limit_is_refused(client, dave, asked):
    client.force_login(dave)
    response = client.post(DECIDE, confirmed("reject", asked, reason="x" * 5_001), headers=HTMX)
    assert response.status_code == 422
    assert "at most 5000 characters" in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_the_list_decision_requires_the_csrf_token(dave, asked):
    client = Client(enforce_csrf_checks=True)
    client.force_login(dave)
    page = client.get(INBOX).content.decode()
    assert page.count('name="csrfmiddlewaretoken"') >= 2  # the bulk form and the dialog's

    refused = client.post(DECIDE, confirmed("approve", asked), headers=HTMX)
    assert refused.status_code == 403
    assert fresh(asked).status == ApprovalStatus.PENDING

    token = client.cookies["csrftoken"].value
    taken = client.post(DECIDE, confirmed("approve", asked), headers={**HTMX, "X-CSRFToken": token})
    assert taken.status_code == 200
    assert fresh(asked).status == ApprovalStatus.APPROVED


def test_the_list_decision_needs_a_signed_in_user_and_a_post(client, dave, asked):
    assert client.post(DECIDE, confirmed("approve", asked)).status_code == 302
    assert fresh(asked).status == ApprovalStatus.PENDING
    client.force_login(dave)
    assert client.get(DECIDE, confirmed("approve", asked)).status_code == 405
    assert fresh(asked).status == ApprovalStatus.PENDING
