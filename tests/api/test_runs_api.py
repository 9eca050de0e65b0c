"""The runs API besides execute: the list and its filters, one run (seed 000 §7.2), its trace
tree (§7.3), cancel, re-run and the workspace's webhook secret, as olive (operator in Acme),
bob (viewer in Acme), ada (admin in Acme) and charlie (Globex) see them. Runs are driven to
their end in the test thread (tests/support/queued_runs.py's Driver)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from governance.models import Secret
from runs.models import LLMCall, Run, RunStatus, ToolCall
from runs.webhooks import SECRET_NAME
from tests.api.checks import error_of
from tests.factories import UserFactory, grant, paused_run
from tests.support.queued_runs import Driver
from tests.support.runs_api import (
    GOOD_INPUT,
    execute_url,
    finished_run,
    greeter,
    operator,
    picker_process,
)

pytestmark = pytest.mark.smoke

LIST = "/api/v1/runs"


def detail(run: Run) -> str:
    return f"/api/v1/runs/{run.pk}"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["run_id"] for item in response.json()["results"]]


@pytest.fixture
def olive(acme):
    return operator(acme)


@pytest.fixture
def ada(acme):
    return grant(UserFactory(username="ada"), acme, "admin")


# -- the list -----------------------------------------------------------------------------------


def test_the_list_shows_the_root_runs_of_the_users_workspaces_newest_first(
    api, olive, charlie, acme, globex
):
    mine = greeter(acme)
    older, newer = finished_run(mine, ms=10), finished_run(mine, ms=20)
    theirs = finished_run(greeter(globex, "globex_greeter"), ms=10)
    api.force_login(olive)

    body = api.get(LIST).json()

    assert [item["run_id"] for item in body["results"]] == [str(newer.pk), str(older.pk)]
    first = body["results"][0]
    assert first["url"] == f"/api/v1/runs/{newer.pk}"
    assert first["trace_url"].endswith(f"/runs/{newer.pk}/")
    assert first["entity"] == {"id": str(mine.pk), "name": "greeter", "type": "ACTION"}
    assert first["workspace"]["slug"] == "acme"
    assert first["status"] == "COMPLETED" and first["execution_time_ms"] == 20
    api.force_login(charlie)
    assert ids(api.get(LIST)) == [str(theirs.pk)]


def test_child_runs_are_listed_only_when_asked(api, olive, acme):
    process = picker_process(acme)
    run = Driver().run(process, {})
    child = Run.objects.get(parent=run)
    api.force_login(olive)

    assert ids(api.get(LIST)) == [str(run.pk)]
    assert set(ids(api.get(LIST, {"root_only": "false"}))) == {str(run.pk), str(child.pk)}


def test_the_list_filters_by_status_entity_workspace_and_time(api, olive, acme, globex):
    grant(olive, globex, "viewer")
    greet, other = greeter(acme), greeter(acme, "other")
    done = finished_run(greet, ms=10)
    failed = finished_run(greet, ms=10, status=RunStatus.FAILED)
    paused = paused_run(other)
    theirs = finished_run(greeter(globex, "globex_greeter"), ms=10)
    Run.objects.filter(pk=done.pk).update(created_at=timezone.now() - timedelta(days=2))
    api.force_login(olive)

    assert set(ids(api.get(LIST, {"status": "completed,FAILED"}))) == {
        str(done.pk),
        str(failed.pk),
        str(theirs.pk),
    }
    assert set(ids(api.get(LIST, {"entity": str(greet.pk)}))) == {str(done.pk), str(failed.pk)}
    assert ids(api.get(LIST, {"workspace": "globex"})) == [str(theirs.pk)]
    assert ids(api.get(LIST, {"workspace": str(globex.pk)})) == [str(theirs.pk)]
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert str(done.pk) not in ids(api.get(LIST, {"created_after": since}))
    assert ids(api.get(LIST, {"created_before": since})) == [str(done.pk)]
    assert ids(api.get(LIST, {"status": "PAUSED", "workspace": "acme"})) == [str(paused.pk)]


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ({"status": "DONE"}, "status"),
        ({"status": ","}, "status"),
        ({"entity": "greeter"}, "entity"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"root_only": "maybe"}, "root_only"),
        ({"sort": "oldest"}, "sort"),
        ({"page": "0"}, "page"),
        ({"page_size": "0"}, "page_size"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(api, olive, globex, query, where):
    api.force_login(olive)
    details = error_of(api.get(LIST, query), 400, "VALIDATION_ERROR")["error"]["details"]
    assert where in details, details


@pytest.mark.parametrize("workspace", ["globex", "nowhere"])  # globex: not one of olive's
def test_a_workspace_filter_that_is_not_yours_is_not_found_naming_it(api, olive, globex, workspace):
    api.force_login(olive)
    body = error_of(api.get(LIST, {"workspace": workspace}), 404, "NOT_FOUND")
    assert body["error"]["details"] == {"workspace": f'no workspace "{workspace}" among yours'}


def test_a_status_filter_takes_several_statuses_repeated_or_comma_separated(api, olive, acme):
    done = finished_run(greeter(acme), ms=10)
    api.force_login(olive)

    repeated = ids(api.get(f"{LIST}?status=COMPLETED&status=failed"))
    commas = ids(api.get(LIST, {"status": "completed,FAILED"}))

    assert repeated == commas == [str(done.pk)]
    assert ids(api.get(LIST, {"status": "FAILED"})) == []


def test_an_empty_creation_range_finds_nothing_rather_than_refusing(api, olive, acme):
    finished_run(greeter(acme), ms=10)
    api.force_login(olive)
    # The schema cannot say "created_before after created_after"; an empty range is empty.
    query = {"created_after": "2026-02-01T00:00:00Z", "created_before": "2026-01-01T00:00:00Z"}

    assert ids(api.get(LIST, query)) == []


def test_a_page_past_the_end_is_not_found(api, olive, acme):
    finished_run(greeter(acme), ms=10)
    api.force_login(olive)
    assert len(ids(api.get(LIST, {"page_size": "1"}))) == 1
    error_of(api.get(LIST, {"page": "2"}), 404, "NOT_FOUND")


# -- one run and its trace ----------------------------------------------------------------------


def test_a_run_answers_the_seeds_document_with_its_children(api, olive, acme):
    run = Driver().run(picker_process(acme), {})
    child = Run.objects.get(parent=run)
    api.force_login(olive)

    body = api.get(detail(run)).json()

    assert body["run_id"] == str(run.pk) and body["status"] == "COMPLETED"
    assert body["entity_name"] == "chooser"
    assert body["completed_at"] and body["started_at"]
    assert body["metrics"]["llm_calls"] == 1 and body["metrics"]["tool_calls"] == 1
    assert body["metrics"]["total_tokens"] == run.total_tokens > 0
    assert body["child_runs"] == [
        {
            "run_id": str(child.pk),
            "entity_id": child.entity.ref,
            "entity_version": "1.0.0",
            "status": "COMPLETED",
        }
    ]
    assert body["error"] is None


def test_the_trace_nests_each_node_with_its_tool_and_model_calls(api, bob, acme):
    run = Driver().run(picker_process(acme), {})
    child = Run.objects.get(parent=run)
    api.force_login(bob)  # a viewer reads traces

    body = api.get(f"{detail(run)}/trace").json()

    assert body["run_id"] == str(run.pk)
    top = body["trace_tree"]
    assert top["node"]["entity_name"] == "chooser" and top["node"]["type"] == "PROCESS"
    assert top["node"]["tool_calls"] == [] and top["node"]["llm_calls"] == []
    (leaf,) = top["children"]
    assert leaf["children"] == []
    node = leaf["node"]
    assert node["run_id"] == str(child.pk) and node["type"] == "ACTION"
    tool = ToolCall.objects.get(run=child)
    llm = LLMCall.objects.get(run=child)
    assert node["tool_calls"] == [
        {"tool_id": "pick", "latency_ms": tool.latency_ms, "success": True}
    ]
    assert node["llm_calls"] == [
        {
            "model": llm.model_name,
            "tokens": llm.total_tokens,
            "latency_ms": llm.latency_ms,
            "purpose": "TOOL_ARGUMENTS",
        }
    ]


def test_a_run_of_another_workspace_or_none_at_all_is_not_found(api, charlie, acme):
    run = finished_run(greeter(acme), ms=10)
    api.force_login(charlie)
    for address in (detail(run), f"{detail(run)}/trace", f"/api/v1/runs/{uuid.uuid4()}"):
        error_of(api.get(address), 404, "NOT_FOUND")
    error_of(api.get("/api/v1/runs/not-a-run"), 404, "NOT_FOUND")


# -- cancel -------------------------------------------------------------------------------------


def test_an_operator_cancels_a_run_that_has_not_ended(api, olive, acme):
    run = paused_run(greeter(acme))
    api.force_login(olive)

    response = api.post(f"{detail(run)}/cancel")

    assert response.status_code == 202, response.content
    body = response.json()
    assert body == {"run_id": str(run.pk), "status": "PAUSED", "cancel_requested": True, "runs": 1}
    run.refresh_from_db()
    assert run.cancel_requested


def test_cancelling_an_ended_run_is_a_conflict(api, olive, acme):
    run = finished_run(greeter(acme), ms=10, status=RunStatus.CANCELLED)
    api.force_login(olive)
    body = error_of(api.post(f"{detail(run)}/cancel"), 409, "CONFLICT")
    assert "cancelled already" in body["error"]["message"]


def test_a_viewer_may_not_cancel_and_another_workspace_does_not_see_the_run(
    api, bob, charlie, acme
):
    run = paused_run(greeter(acme))
    api.force_login(bob)
    error_of(api.post(f"{detail(run)}/cancel"), 403, "PERMISSION_DENIED")
    api.force_login(charlie)
    error_of(api.post(f"{detail(run)}/cancel"), 404, "NOT_FOUND")
    run.refresh_from_db()
    assert not run.cancel_requested


# -- re-run -------------------------------------------------------------------------------------


def test_a_rerun_starts_a_new_root_run_with_the_same_input_and_context(api, olive, acme):
    api.force_login(olive)
    first = api.post(
        execute_url(greeter(acme)), {"input_data": GOOD_INPUT, "context": {"ticket": "T-1"}}
    ).json()

    response = api.post(f"/api/v1/runs/{first['run_id']}/rerun")

    assert response.status_code == 202, response.content
    again = Run.objects.get(pk=response.json()["run_id"])
    assert str(again.pk) != first["run_id"] and again.parent_id is None
    assert again.input_data == GOOD_INPUT and again.context == {"ticket": "T-1"}
    assert response.json()["trace_url"].endswith(f"/runs/{again.pk}/")


def test_a_viewer_may_not_rerun_and_another_workspace_does_not_see_the_run(api, bob, charlie, acme):
    run = finished_run(greeter(acme), ms=10, input_data=GOOD_INPUT)
    api.force_login(bob)
    error_of(api.post(f"{detail(run)}/rerun"), 403, "PERMISSION_DENIED")
    api.force_login(charlie)
    error_of(api.post(f"{detail(run)}/rerun"), 404, "NOT_FOUND")
    assert Run.objects.count() == 1


# -- the webhook secret -------------------------------------------------------------------------


def test_an_admin_reads_the_workspaces_webhook_secret_kept_in_the_vault(api, ada, acme):
    api.force_login(ada)

    first = api.get("/api/v1/workspaces/acme/webhook-secret")

    assert first.status_code == 200, first.content
    body = first.json()
    assert body["workspace"] == {"id": acme.pk, "slug": "acme", "name": "Acme"}
    assert body["algorithm"] == "HMAC-SHA256" and body["header"] == "X-Hierarch-Signature"
    assert len(body["secret"]) > 30
    assert first["Cache-Control"] == "no-store"
    stored = Secret.objects.get(workspace=acme, name=SECRET_NAME)
    assert body["secret"] not in stored.ciphertext  # encrypted at rest
    again = api.get(f"/api/v1/workspaces/{acme.pk}/webhook-secret").json()
    assert again["secret"] == body["secret"]  # made once


def test_only_an_admin_reads_the_webhook_secret(api, olive, charlie, acme):
    api.force_login(olive)
    body = error_of(api.get("/api/v1/workspaces/acme/webhook-secret"), 403, "PERMISSION_DENIED")
    assert "admin" in body["error"]["message"]
    api.force_login(charlie)
    error_of(api.get("/api/v1/workspaces/acme/webhook-secret"), 404, "NOT_FOUND")
    assert not Secret.objects.filter(name=SECRET_NAME).exists()
