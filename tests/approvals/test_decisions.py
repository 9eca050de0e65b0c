"""Deciding on a request's page: approve, edit, reject, lock a constraint; what is refused
stays open and says why at the field; a request decided first says who and when."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from runs.models import Run, RunStatus
from tests.factories import approval_request, make_tool

pytestmark = pytest.mark.smoke

HTMX = {"HX-Request": "true"}


def decide(client, approval, decision: str, htmx: bool = True, **fields):
    data = {"decision": decision, **{f"{decision}-{name}": v for name, v in fields.items()}}
    url = reverse("approvals:decision", args=[approval.pk])
    return client.post(url, data, headers=HTMX if htmx else {})


def fresh(approval) -> Approval:
    return Approval.objects.get(pk=approval.pk)


def test_it_approves_and_shows_who_decided(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "approve", notes="Looks fine.")
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="approval-decision"')
    assert "Approved" in page
    assert "dave" in page
    assert "Looks fine." in page
    assert "&quot;query&quot;: &quot;quarterly numbers&quot;" in page  # the approved payload
    approval = fresh(asked)
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.decision == "approve"
    assert approval.responded_by == dave
    assert approval.reviewer_notes == "Looks fine."
    assert approval.approved_payload == {"query": "quarterly numbers"}
    assert Run.objects.get(pk=asked.run_id).status == RunStatus.RUNNING


def test_it_approves_an_edit(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "edit", payload='{"query": "quarterly revenue"}')
    assert response.status_code == 200
    assert "&quot;query&quot;: &quot;quarterly revenue&quot;" in response.content.decode()
    approval = fresh(asked)
    assert (approval.status, approval.decision) == (ApprovalStatus.APPROVED, "edit")
    assert approval.approved_payload == {"query": "quarterly revenue"}


def test_it_refuses_malformed_json_at_the_field(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "edit", payload='{"query": }')
    assert response.status_code == 422
    page = response.content.decode()
    assert 'id="id_edit-payload_error"' in page
    assert "This is not valid JSON: Expecting value at line 1, column 11." in page
    assert "{&quot;query&quot;: }</textarea>" in page  # what was typed, kept to correct
    assert '<details class="decide-more" open>' in page
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_it_refuses_an_edit_that_breaks_the_schema_at_the_field(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "edit", payload='{"query": "ab", "limit": 5}')
    assert response.status_code == 422
    page = response.content.decode()
    assert 'id="id_edit-payload_error"' in page
    assert "Additional properties are not allowed (&#x27;limit&#x27; was unexpected)" in page
    assert fresh(asked).status == ApprovalStatus.PENDING
    response = decide(client, asked, "edit", payload='{"query": "ab"}')
    assert "query: &#x27;ab&#x27; is too short" in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_it_rejects_with_feedback(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "reject", notes="Do not search for clients by name.")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Rejected" in page
    assert "Feedback" in page
    approval = fresh(asked)
    assert (approval.status, approval.decision) == (ApprovalStatus.REJECTED, "reject")
    assert approval.reviewer_notes == "Do not search for clients by name."
    assert approval.approved_payload is None


def test_it_locks_a_constraint(client, dave, acme, asked):
    make_tool(acme, "send_email")
    client.force_login(dave)
    response = decide(
        client,
        asked,
        "lock_constraint",
        constraint="Never email anyone outside Acme.",
        forbid_tools=["send_email", "http_request", "send_email"],
    )
    assert response.status_code == 200
    approval = fresh(asked)
    assert (approval.status, approval.decision) == (ApprovalStatus.APPROVED, "lock_constraint")
    assert approval.locked_constraint == {
        "constraint": "Never email anyone outside Acme.",
        "forbid_tools": ["send_email", "http_request"],
    }
    assert "Never email anyone outside Acme." in response.content.decode()


def test_it_asks_for_the_constraint_in_words(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "lock_constraint", constraint="", forbid_tools="record")
    assert response.status_code == 422
    assert "Say the constraint in words." in response.content.decode()
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_it_refuses_a_decision_the_checkpoint_does_not_allow(client, dave, acme_run):
    approval = approval_request(acme_run, allowed_decisions=["approve", "reject"])
    client.force_login(dave)
    response = decide(client, approval, "edit", payload='{"query": "fine"}')
    assert response.status_code == 422
    assert "this request takes approve, reject, not edit" in response.content.decode()
    assert fresh(approval).status == ApprovalStatus.PENDING


def test_it_says_who_decided_first_with_409(client, dave, root, asked):
    approval_decide(approval=asked, user=root, decision="approve")
    client.force_login(dave)
    response = decide(client, asked, "reject", notes="too late")
    assert response.status_code == 409
    page = response.content.decode()
    assert "already decided by root at" in page
    assert "(approve)" in page
    assert fresh(asked).decision == "approve"


def test_it_refuses_a_viewer_with_403(client, bob, asked):
    client.force_login(bob)
    assert decide(client, asked, "approve").status_code == 403
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_it_answers_404_to_a_decision_on_another_workspaces_request(client, erin, asked):
    client.force_login(erin)
    assert decide(client, asked, "approve").status_code == 404
    assert fresh(asked).status == ApprovalStatus.PENDING


def test_it_returns_to_the_page_after_a_decision_without_javascript(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "approve", htmx=False)
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:detail", args=[asked.pk])
    page = client.get(response["Location"]).content.decode()
    assert "Approved" in page


def test_it_shows_the_whole_page_with_the_errors_without_javascript(client, dave, asked):
    client.force_login(dave)
    response = decide(client, asked, "edit", htmx=False, payload="not json")
    assert response.status_code == 422
    page = response.content.decode()
    assert "<html" in page
    assert "This is not valid JSON" in page


def test_it_refuses_an_unknown_decision(client, dave, asked):
    client.force_login(dave)
    assert decide(client, asked, "shrug").status_code == 400


def test_it_requires_the_csrf_token(dave, asked):
    client = Client(enforce_csrf_checks=True)
    client.force_login(dave)
    url = reverse("approvals:decision", args=[asked.pk])
    page = client.get(reverse("approvals:detail", args=[asked.pk])).content.decode()
    assert "hx-headers='{&quot;X-CSRFToken&quot;" in page or 'hx-headers=\'{"X-CSRFToken"' in page

    refused = client.post(url, {"decision": "approve"}, headers=HTMX)
    assert refused.status_code == 403
    assert fresh(asked).status == ApprovalStatus.PENDING

    token = client.cookies["csrftoken"].value
    taken = client.post(url, {"decision": "approve"}, headers={**HTMX, "X-CSRFToken": token})
    assert taken.status_code == 200
    assert fresh(asked).status == ApprovalStatus.APPROVED


def test_it_keeps_the_payload_json_as_typed_when_approved_unchanged(client, dave, acme_run):
    payload = {"items": [1, 2, {"deep": [True, None]}], "name": "ünïcode"}
    approval = approval_request(acme_run, payload=payload, edit_schema=None)
    client.force_login(dave)
    decide(client, approval, "edit", payload=json.dumps(payload))
    assert fresh(approval).approved_payload == payload
