"""GET /runs/{id} says what a run waits on a person for (`needs_attention`), the call it
names to raise a budget works, the schema documents both, and a run of another workspace is
a 404 for both."""

from __future__ import annotations

from django.db import transaction

from runs.models import Run
from runs.services import run_start
from tests.api.checks import error_of
from tests.factories import UserFactory, grant
from tests.support.attention import budget_tree
from tests.support.queued_runs import Driver


def blocked(acme) -> tuple[Run, Run, Driver]:
    driver = Driver()
    with transaction.atomic():
        root = run_start(entity=budget_tree(acme), input_data={})
    driver.queue.append(str(root.pk))
    driver.drain()
    return root, Run.objects.get(trace_id=root.trace_id, entity__name="writer"), driver


def test_the_run_names_the_blocked_leaf_and_its_call_raises_the_budget(api, acme):
    olga = grant(UserFactory(username="olga"), acme, "operator")
    root, leaf, driver = blocked(acme)
    api.force_login(olga)

    (item,) = api.get(f"/api/v1/runs/{root.pk}").json()["needs_attention"]
    assert (item["run_id"], item["reason"]["code"]) == (str(leaf.pk), "BUDGET_EXHAUSTED")
    call = item["action"]["api"]

    answer = api.post(call["path"], {"budget_usd": "0.009"}, format="json")

    assert answer.status_code == 200, answer.content
    assert answer.json()["resumed"] == [str(leaf.pk)]
    driver.queue.extend(answer.json()["resumed"])
    driver.drain()
    root.refresh_from_db()
    rows = list(Run.objects.values_list("entity__name", "status", "error_code", "error_message"))
    assert root.status == "COMPLETED", rows
    assert api.get(f"/api/v1/runs/{root.pk}").json()["needs_attention"] == []


def test_a_viewer_may_read_but_not_raise(api, acme, bob):
    root, leaf, _ = blocked(acme)
    api.force_login(bob)
    assert len(api.get(f"/api/v1/runs/{root.pk}").json()["needs_attention"]) == 1
    refused = api.post(
        f"/api/v1/runs/{leaf.pk}/raise-budget", {"budget_usd": "0.005"}, format="json"
    )
    assert refused.status_code == 403


def test_a_raise_that_is_not_an_amount_is_refused(api, acme):
    olga = grant(UserFactory(username="olga"), acme, "operator")
    _, leaf, _ = blocked(acme)
    api.force_login(olga)
    answer = api.post(f"/api/v1/runs/{leaf.pk}/raise-budget", {"budget_usd": "lots"}, format="json")
    error_of(answer, 400, "VALIDATION_ERROR")
    assert "budget_usd" in answer.json()["error"]["details"]
    unknown = api.post(f"/api/v1/runs/{leaf.pk}/raise-budget", {"budget": "1"}, format="json")
    assert unknown.status_code == 400


def test_a_run_of_another_workspace_is_not_found(api, acme, charlie):
    root, leaf, _ = blocked(acme)
    api.force_login(charlie)
    error_of(api.get(f"/api/v1/runs/{root.pk}"), 404, "NOT_FOUND")
    raised = api.post(
        f"/api/v1/runs/{leaf.pk}/raise-budget", {"budget_usd": "0.005"}, format="json"
    )
    error_of(raised, 404, "NOT_FOUND")
    leaf.refresh_from_db()
    assert leaf.status == "BLOCKED"


def test_the_schema_documents_needs_attention_and_the_raise(api, acme, bob):
    api.force_login(bob)
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()
    document = schema["components"]["schemas"]["RunDocument"]
    assert "needs_attention" in document["properties"]
    assert "needs_attention" in document["required"]
    assert "post" in schema["paths"]["/api/v1/runs/{id}/raise-budget"]
