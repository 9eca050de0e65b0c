"""The approvals API: the list and its filters, the detail, and decisions with every refusal,
as dave (approver in Acme), bob (viewer in Acme) and charlie (Globex) see them."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from governance.models import AuditAction, AuditRecord
from runs.models import Run, RunStatus
from tests.api.checks import error_of
from tests.api.factories import POST_SCHEMA, approval_for
from tests.factories import (
    EntityFactory,
    UserFactory,
    WorkspaceFactory,
    grant,
    make_tool,
    paused_run,
)

LIST = "/api/v1/approvals"


def detail(approval: Approval) -> str:
    return f"/api/v1/approvals/{approval.pk}"


def decision(approval: Approval) -> str:
    return f"/api/v1/approvals/{approval.pk}/decision"


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["results"]]


def decided_records(approval: Approval) -> int:
    return AuditRecord.objects.filter(
        action=AuditAction.APPROVAL_DECIDED, object_id=str(approval.pk)
    ).count()


def still_pending(approval: Approval) -> bool:
    approval.refresh_from_db()
    return approval.status == ApprovalStatus.PENDING and decided_records(approval) == 0


# -- the list -----------------------------------------------------------------------------------


def test_the_list_shows_the_requests_of_the_users_workspaces_only(
    api, dave, charlie, acme_request, globex_request
):
    api.force_login(dave)
    assert ids(api.get(LIST)) == [acme_request.pk]
    api.force_login(charlie)
    assert ids(api.get(LIST)) == [globex_request.pk]


def test_a_viewer_sees_the_requests_of_their_workspace(api, bob, acme_request):
    api.force_login(bob)
    assert ids(api.get(LIST)) == [acme_request.pk]


def test_a_superuser_sees_the_requests_of_every_workspace(api, root, acme_request, globex_request):
    api.force_login(root)
    assert sorted(ids(api.get(LIST))) == sorted([acme_request.pk, globex_request.pk])


def test_the_list_names_what_each_request_asks_newest_first(api, dave, publisher):
    run = paused_run(publisher)
    older, newer = approval_for(run), approval_for(run, step_name="Report")
    api.force_login(dave)

    body = api.get(LIST).json()

    assert body["count"] == 2
    assert [item["id"] for item in body["results"]] == [newer.pk, older.pk]
    first = body["results"][1]
    assert first["url"] == f"/api/v1/approvals/{older.pk}"
    assert first["trigger"] == "BEFORE_TOOL_CALL"
    assert first["step"] == "Publish the post"
    assert first["status"] == "PENDING"
    assert first["risk_level"] == "high"
    assert first["run"] == str(run.pk)
    assert first["workspace"] == {"id": publisher.workspace_id, "slug": "acme", "name": "Acme"}
    assert first["entity"]["name"] == "publisher"
    assert first["decision"] == "" and first["responded_by"] is None


def test_the_list_filters_by_status_one_or_several(api, dave, publisher):
    run = paused_run(publisher)
    pending = approval_for(run)
    approved = approval_for(run, status=ApprovalStatus.APPROVED, decision="approve")
    timed_out = approval_for(run, status=ApprovalStatus.TIMEOUT)
    api.force_login(dave)

    assert ids(api.get(LIST, {"status": "PENDING"})) == [pending.pk]
    assert ids(api.get(LIST, {"status": "approved"})) == [approved.pk]
    assert sorted(ids(api.get(LIST, {"status": "APPROVED,TIMEOUT"}))) == sorted(
        [approved.pk, timed_out.pk]
    )


def test_the_list_filters_by_workspace_id_or_slug(api, dave, acme, acme_request):
    other = WorkspaceFactory(name="Initech", slug="initech")
    grant(dave, other, "approver")
    elsewhere = approval_for(paused_run(EntityFactory(workspace=other, name="initech_poster")))
    api.force_login(dave)

    assert ids(api.get(LIST, {"workspace": "acme"})) == [acme_request.pk]
    assert ids(api.get(LIST, {"workspace": str(other.pk)})) == [elsewhere.pk]


def test_the_list_filters_by_run(api, dave, publisher):
    one, two = paused_run(publisher), paused_run(publisher)
    wanted = approval_for(one)
    approval_for(two)
    api.force_login(dave)

    assert ids(api.get(LIST, {"run": str(one.pk)})) == [wanted.pk]
    assert ids(api.get(LIST, {"run": str(uuid.uuid4())})) == []


def test_a_workspace_filter_for_another_workspace_is_refused_as_if_it_did_not_exist(
    api, dave, globex, globex_request
):
    api.force_login(dave)

    theirs = error_of(api.get(LIST, {"workspace": "globex"}), 404, "NOT_FOUND")
    nowhere = error_of(api.get(LIST, {"workspace": "nowhere"}), 404, "NOT_FOUND")
    by_id = error_of(api.get(LIST, {"workspace": str(globex.pk)}), 404, "NOT_FOUND")

    assert theirs["error"]["details"] == {"workspace": 'no workspace "globex" among yours'}
    assert nowhere["error"]["details"] == {"workspace": 'no workspace "nowhere" among yours'}
    assert by_id["error"]["details"] == {"workspace": f'no workspace "{globex.pk}" among yours'}


def test_bad_filter_values_are_refused_with_a_clear_message(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(api.get(LIST, {"status": "MAYBE", "run": "run-7"}), 400, "VALIDATION_ERROR")

    assert body["error"]["details"] == {
        "status": "MAYBE is not a status; use PENDING, ESCALATED, APPROVED, REJECTED, TIMEOUT, "
        "NOTIFIED, CANCELLED",
        "run": '"run-7" is not a run id (a UUID)',
    }
    assert "status: MAYBE is not a status" in body["error"]["message"]
    assert body["retryable"] is False


def test_an_unknown_filter_is_refused_by_name(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(api.get(LIST, {"stauts": "PENDING"}), 400, "VALIDATION_ERROR")

    assert list(body["error"]["details"]) == ["stauts"]
    assert "stauts: unknown field" in body["error"]["message"]


def test_the_list_comes_in_pages(api, dave, publisher):
    run = paused_run(publisher)
    made = [approval_for(run) for _ in range(3)]
    api.force_login(dave)

    first = api.get(LIST, {"page_size": 2}).json()
    second = api.get(LIST, {"page_size": 2, "page": 2}).json()

    assert first["count"] == 3 and len(first["results"]) == 2 and "page=2" in first["next"]
    assert [item["id"] for item in first["results"] + second["results"]] == [
        a.pk for a in reversed(made)
    ]
    assert second["next"] is None


def test_a_page_that_is_not_a_number_is_refused_and_one_past_the_end_is_not_found(
    api, dave, acme_request
):
    api.force_login(dave)

    wrong = error_of(api.get(LIST, {"page": "two", "page_size": "0"}), 400, "VALIDATION_ERROR")
    past = error_of(api.get(LIST, {"page": 9}), 404, "NOT_FOUND")

    assert set(wrong["error"]["details"]) == {"page", "page_size"}
    error_of(api.get(LIST, {"page": "²"}), 400, "VALIDATION_ERROR")
    assert past["error"]["message"].startswith("page 9 does not exist")


# -- the detail ---------------------------------------------------------------------------------


def test_the_detail_shows_everything_the_inbox_shows(api, dave, acme_request):
    api.force_login(dave)

    response = api.get(detail(acme_request))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["trigger"] == "BEFORE_TOOL_CALL" and body["step"] == "Publish the post"
    assert body["subject"] == "tool_arguments"
    assert body["payload"] == {"channel": "news", "text": "Our spring range is out"}
    assert body["edit_schema"] == POST_SCHEMA
    assert body["allowed_decisions"] == []
    assert body["can_decide"] is True
    assert body["context_snapshot"] == {"input": {"brief": "spring range"}, "state": {"drafts": 2}}
    # Seed 002's explanation packet.
    assert body["reasoning_summary"] == "Posts the approved draft to the news channel"
    assert body["confidence"] == {"overall": 0.72}
    assert body["risk_level"] == "high"
    assert body["risk_factors"] == ["publishes to the public", "cannot be undone"]
    assert body["alternatives"] == [{"name": "Post to the blog", "confidence": 0.6}]
    assert body["cost_estimate"]["cost_so_far_usd"] == "0.0021"
    assert body["downstream_impact"] == {"steps": ["Report"], "reversible": False}
    # Seed 001's judge.
    assert body["judge"]["rationale"] == "tone is off"
    # The decision, not taken yet, and the timeout.
    assert body["decision"] == "" and body["responded_by"] is None
    assert body["responded_at"] is None and body["approved_payload"] is None
    assert body["timeout_action"] == "ABORT" and body["timeout_ms"] == 3_600_000
    assert "due_at" in body and "escalated_at" in body
    # Where to look further.
    assert body["run"] == str(acme_request.run_id)
    assert body["trace_id"] == str(acme_request.trace_id)
    assert body["trace_url"]
    assert body["page_url"] == f"/approvals/{acme_request.pk}/"


def test_a_viewer_sees_a_request_but_may_not_decide_it(api, bob, acme_request):
    api.force_login(bob)

    assert api.get(detail(acme_request)).json()["can_decide"] is False


def test_a_request_of_another_workspace_is_not_found_as_if_it_did_not_exist(
    api, charlie, acme_request
):
    api.force_login(charlie)

    theirs = error_of(api.get(detail(acme_request)), 404, "NOT_FOUND")
    nowhere = error_of(api.get("/api/v1/approvals/999999"), 404, "NOT_FOUND")

    assert theirs["error"] == nowhere["error"]
    assert theirs["error"]["message"] == "no such approval request"


# -- decisions ----------------------------------------------------------------------------------


def test_an_approver_approves_and_the_run_goes_on(api, dave, acme_request):
    api.force_login(dave)

    response = api.post(decision(acme_request), {"decision": "approve", "notes": "fine"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "APPROVED" and body["decision"] == "approve"
    assert body["responded_by"] == "dave" and body["responded_at"]
    assert body["reviewer_notes"] == "fine"
    assert body["approved_payload"] == acme_request.payload
    assert body["can_decide"] is False
    assert decided_records(acme_request) == 1
    assert Run.objects.get(pk=acme_request.run_id).status == RunStatus.RUNNING


def test_an_edit_within_the_schema_goes_on_with_the_edited_payload(api, dave, acme_request):
    api.force_login(dave)
    edited = {"channel": "blog", "text": "Our spring range is out (blog)"}

    response = api.post(decision(acme_request), {"decision": "edit", "payload": edited})

    assert response.status_code == 200, response.content
    assert response.json()["approved_payload"] == edited
    acme_request.refresh_from_db()
    assert acme_request.status == ApprovalStatus.APPROVED
    assert acme_request.approved_payload == edited


def test_an_edit_that_breaks_the_schema_is_refused_with_the_field_errors_and_stays_pending(
    api, dave, acme_request
):
    api.force_login(dave)

    body = error_of(
        api.post(
            decision(acme_request),
            {"decision": "edit", "payload": {"channel": "tv", "text": ""}},
        ),
        400,
        "VALIDATION_ERROR",
    )

    assert set(body["error"]["details"]) == {"payload.channel", "payload.text"}
    assert "'tv' is not one of ['news', 'blog']" in body["error"]["details"]["payload.channel"]
    assert "payload.channel" in body["error"]["message"]
    assert still_pending(acme_request)


def test_a_reject_records_the_feedback(api, dave, acme_request):
    api.force_login(dave)

    response = api.post(
        decision(acme_request), {"decision": "reject", "notes": "  Wrong audience.  "}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "REJECTED" and body["reviewer_notes"] == "Wrong audience."
    assert body["approved_payload"] is None


def test_lock_constraint_binds_the_rest_of_the_run(api, dave, acme, acme_request):
    make_tool(acme, "blog")
    api.force_login(dave)

    response = api.post(
        decision(acme_request),
        {
            "decision": "lock_constraint",
            "constraint": {"constraint": " Never post on the blog ", "forbid_tools": ["blog"]},
        },
    )

    assert response.status_code == 200, response.content
    assert response.json()["locked_constraint"] == {
        "constraint": "Never post on the blog",
        "forbid_tools": ["blog"],
    }


def test_a_lock_on_a_tool_that_does_not_exist_is_refused(api, dave, acme, globex, acme_request):
    make_tool(globex, "blog")  # another workspace's tool is not one Acme's runs can call
    api.force_login(dave)

    body = error_of(
        api.post(
            decision(acme_request),
            {
                "decision": "lock_constraint",
                "constraint": {"constraint": "No blog", "forbid_tools": ["blog", "record"]},
            },
        ),
        400,
        "VALIDATION_ERROR",
    )

    assert body["error"]["details"] == {
        "constraint.forbid_tools": "no tool named 'blog' in Acme or among the built-in tools; "
        "pick from the workspace's tools"
    }
    assert Approval.objects.get(pk=acme_request.pk).status == ApprovalStatus.PENDING


def test_a_constraint_that_is_not_valid_is_refused_with_the_field_errors(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decision": "lock_constraint", "constraint": 7}),
        400,
        "VALIDATION_ERROR",
    )

    assert list(body["error"]["details"]) == ["constraint"]
    assert still_pending(acme_request)


def test_a_decision_on_a_decided_request_answers_409_naming_who_decided_and_when(
    api, dave, acme_request
):
    ada = grant(UserFactory(username="ada"), acme_request.workspace, "approver")
    api.force_login(ada)
    first = api.post(decision(acme_request), {"decision": "reject", "notes": "no"})
    assert first.status_code == 200, first.content
    acme_request.refresh_from_db()
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decision": "approve"}), 409, "ALREADY_DECIDED"
    )

    at = acme_request.responded_at.isoformat()
    assert body["error"]["message"] == f"already decided by ada at {at} (reject)"
    assert body["error"]["details"] == {
        "status": "REJECTED",
        "decision": "reject",
        "responded_by": "ada",
        "responded_at": at,
    }
    assert body["retryable"] is False
    assert decided_records(acme_request) == 1


def test_a_decision_after_the_timeout_fired_answers_409(api, dave, publisher):
    fired = timezone.now()
    timed_out = approval_for(
        paused_run(publisher), status=ApprovalStatus.TIMEOUT, responded_at=fired
    )
    api.force_login(dave)

    body = error_of(api.post(decision(timed_out), {"decision": "approve"}), 409, "ALREADY_DECIDED")

    assert body["error"]["message"].startswith(f"this request timed out at {fired.isoformat()}")
    assert body["retryable"] is False


@pytest.mark.parametrize("persona", ["bob", "alice"])  # a viewer, a designer
def test_a_member_who_is_not_an_approver_may_not_decide_and_is_told_which_role_is_needed(
    api, acme_request, persona, request
):
    api.force_login(request.getfixturevalue(persona))

    body = error_of(
        api.post(decision(acme_request), {"decision": "approve"}), 403, "PERMISSION_DENIED"
    )

    assert body["error"]["message"] == "only an approver of Acme may decide this request"
    assert still_pending(acme_request)


def test_an_escalated_request_is_for_the_workspaces_admins(api, dave, publisher):
    escalated = approval_for(
        paused_run(publisher), status=ApprovalStatus.ESCALATED, escalated_at=timezone.now()
    )
    api.force_login(dave)

    body = error_of(
        api.post(decision(escalated), {"decision": "approve"}), 403, "PERMISSION_DENIED"
    )

    assert body["error"]["message"] == "only an admin of Acme may decide this request"


def test_a_decision_on_another_workspaces_request_is_not_found(api, charlie, acme_request):
    api.force_login(charlie)

    body = error_of(api.post(decision(acme_request), {"decision": "approve"}), 404, "NOT_FOUND")

    assert body["error"]["message"] == "no such approval request"
    assert still_pending(acme_request)


def test_a_decision_that_is_not_one_of_the_four_is_refused(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decision": "maybe"}), 400, "VALIDATION_ERROR"
    )

    assert body["error"]["details"] == {
        "decision": '"maybe" is not a decision; use one of approve, edit, reject, lock_constraint'
    }
    assert still_pending(acme_request)


def test_a_decision_the_request_does_not_take_is_refused(api, dave, publisher):
    narrow = approval_for(paused_run(publisher), allowed_decisions=["approve", "reject"])
    api.force_login(dave)

    body = error_of(
        api.post(decision(narrow), {"decision": "edit", "payload": narrow.payload}),
        400,
        "VALIDATION_ERROR",
    )

    assert body["error"]["message"] == "this request takes approve, reject, not edit"
    assert still_pending(narrow)


def test_a_payload_or_constraint_with_the_wrong_decision_is_refused_not_dropped(
    api, dave, acme_request
):
    api.force_login(dave)

    body = error_of(
        api.post(
            decision(acme_request),
            {"decision": "approve", "payload": {"channel": "blog"}, "constraint": "be kind"},
        ),
        400,
        "VALIDATION_ERROR",
    )

    assert body["error"]["details"] == {
        "payload": "only an edit takes a payload",
        "constraint": "only lock_constraint takes a constraint",
    }
    assert still_pending(acme_request)


def test_unknown_fields_in_the_body_are_refused_by_name(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decision": "approve", "note": "typo", "force": True}),
        400,
        "VALIDATION_ERROR",
    )

    assert set(body["error"]["details"]) == {"note", "force"}
    assert body["error"]["details"]["note"].startswith("unknown field")
    assert "force: unknown field" in body["error"]["message"]
    assert "note: unknown field" in body["error"]["message"]
    assert still_pending(acme_request)


def test_unknown_fields_are_named_along_with_the_other_problems(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decison": "approve"}), 400, "VALIDATION_ERROR"
    )

    assert set(body["error"]["details"]) == {"decison", "decision"}


def test_malformed_json_is_refused(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(
        api.post(
            decision(acme_request), data='{"decision": "approve",', content_type="application/json"
        ),
        400,
        "MALFORMED_JSON",
    )

    assert "JSON parse error" in body["error"]["message"]
    assert still_pending(acme_request)


def test_a_body_that_is_not_an_object_is_refused(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(api.post(decision(acme_request), ["approve"]), 400, "VALIDATION_ERROR")

    assert "expected a dictionary" in body["error"]["message"].lower()


@pytest.mark.parametrize("status", [ApprovalStatus.CANCELLED, ApprovalStatus.NOTIFIED])
def test_a_closed_request_cannot_be_decided(api, dave, publisher, status):
    closed = approval_for(paused_run(publisher), status=status, responded_at=timezone.now())
    api.force_login(dave)

    error_of(api.post(decision(closed), {"decision": "approve"}), 409, "ALREADY_DECIDED")


def test_an_edit_without_a_payload_is_refused_before_anything_is_decided(api, dave, acme_request):
    api.force_login(dave)

    body = error_of(api.post(decision(acme_request), {"decision": "edit"}), 400, "VALIDATION_ERROR")

    assert body["error"]["details"] == {"payload": "This field is required."}
    assert still_pending(acme_request)


def test_a_null_payload_with_another_decision_is_refused_as_the_schema_says(
    api, dave, acme_request
):
    api.force_login(dave)

    body = error_of(
        api.post(decision(acme_request), {"decision": "approve", "payload": None}, format="json"),
        400,
        "VALIDATION_ERROR",
    )

    assert body["error"]["details"] == {"payload": "only an edit takes a payload"}
    assert still_pending(acme_request)
