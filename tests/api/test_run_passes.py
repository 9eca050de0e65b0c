"""A run out of passes, through the API: its document says what to do, POST /runs/{id}/passes
gives it more and it goes on; bad bodies are named, a run not out of passes is a 409, a
viewer a 403, another workspace's run a 404."""

from __future__ import annotations

import pytest

from tests.api.checks import error_of
from tests.factories import UserFactory, grant
from tests.support.loops import out_of_passes


@pytest.fixture
def olga(acme):
    return grant(UserFactory(username="olga"), acme, "operator")


def test_the_document_names_the_call_that_gives_more_passes_and_the_run_goes_on(api, acme, olga):
    run, driver = out_of_passes(acme)
    api.force_login(olga)
    (item,) = api.get(f"/api/v1/runs/{run.pk}").json()["needs_attention"]
    assert item["reason"]["code"] == "MAX_PASSES_EXHAUSTED"
    assert "2 of 2 passes ran" in item["reason"]["message"]
    call = item["action"]["api"]
    assert (call["method"], call["path"]) == ("POST", f"/api/v1/runs/{run.pk}/passes")

    answer = api.post(call["path"], call["body"], format="json")

    assert answer.status_code == 202, answer.content
    assert answer.json() == {"run_id": str(run.pk), "status": "RUNNING", "passes_granted": 1}
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.iteration) == ("COMPLETED", 3), run.error_message
    assert api.get(f"/api/v1/runs/{run.pk}").json()["needs_attention"] == []
    # Ended, it takes no more.
    error_of(api.post(call["path"], {"passes": 1}, format="json"), 409, "CONFLICT")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"passes": 0},
        {"passes": -1},
        {"passes": "x"},
        {"passes": 10**30},
        {"passes": 1.5},
        {"passes": 1001},
        {"passes": 1, "more": True},
        {"passes": None},
        {"passes": "\x00"},
    ],
)
def test_a_body_that_is_not_a_number_of_passes_is_refused(api, acme, olga, body):
    run, _ = out_of_passes(acme)
    api.force_login(olga)
    answer = api.post(f"/api/v1/runs/{run.pk}/passes", body, format="json")
    assert answer.status_code == 400, answer.content
    run.refresh_from_db()
    assert (run.status, run.passes_granted) == ("BLOCKED", 0)


def test_a_viewer_may_not_and_another_workspace_does_not_see_it(api, acme, bob, charlie):
    run, _ = out_of_passes(acme)
    api.force_login(bob)
    error_of(
        api.post(f"/api/v1/runs/{run.pk}/passes", {"passes": 1}, format="json"),
        403,
        "PERMISSION_DENIED",
    )
    api.force_login(charlie)
    error_of(
        api.post(f"/api/v1/runs/{run.pk}/passes", {"passes": 1}, format="json"), 404, "NOT_FOUND"
    )
    run.refresh_from_db()
    assert run.status == "BLOCKED"
