"""`log_level: ERROR` through the API with a real Celery worker on PostgreSQL: a tree whose leaf
runs out of budget writes only its own record (each run's creation and statuses), and what
reads those events still works: the `run.needs_attention` webhook names the block by its
`run.status` event, and the run document says what waits on a person."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from runs.models import Run, RunEvent, WebhookDelivery, WebhookStatus
from tests.factories import EntityFactory, UserFactory, grant
from tests.reliability.processes import wait_until
from tests.support.clients import signed_in
from tests.support.runs import io
from tests.support.runs_api import execute_url
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.reliability

QUIET = {"logging": {"log_level": "ERROR"}}


def quiet_budget_tree(workspace):
    """process `launch` > agent `planner` > skill `writer`, whose budget is too small for
    one model call; every one of them logs at ERROR."""
    leaf = EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        io_contract=io(ok="boolean"),
        max_cost=0.000001,
        observability=QUIET,
    )
    middle = EntityFactory(
        workspace=workspace, name="planner", type="AGENT", children=[leaf], observability=QUIET
    )
    return EntityFactory(
        workspace=workspace,
        name="launch",
        type="PROCESS",
        children=[middle],
        max_cost=0.01,
        observability=QUIET,
    )


def test_a_quiet_tree_keeps_its_own_record_and_its_needs_attention_webhook(
    processes, workspace, settings
):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": True}
    processes.worker("w1", HIERARCH_WEBHOOKS_ALLOW_PRIVATE="1")
    olive = grant(UserFactory(username="olive"), workspace, "operator")
    api = signed_in(APIClient, olive)
    with Receiver() as receiver:
        answer = api.post(
            execute_url(quiet_budget_tree(workspace)),
            {"input_data": {}, "execution_options": {"webhook_url": receiver.url}},
            format="json",
        )
        assert answer.status_code == 202, answer.content
        root = Run.objects.get(pk=answer.json()["run_id"])
        leaf = wait_until(
            lambda: Run.objects.filter(
                trace_id=root.trace_id, entity__name="writer", status="BLOCKED"
            ).first(),
            timeout=30,
            what="the leaf's block",
            processes=processes,
        )
        wait_until(
            lambda: WebhookDelivery.objects.filter(
                run=root, status=WebhookStatus.DELIVERED
            ).exists(),
            timeout=30,
            what="the needs_attention webhook",
            processes=processes,
        )
        processes.wait_idle()

    events = list(RunEvent.objects.filter(trace_id=root.trace_id).order_by("seq"))
    assert {e.type for e in events} == {"run.created", "run.status"}
    assert [e.payload["status"] for e in events if e.run_id == leaf.pk] == ["RUNNING", "BLOCKED"]
    (headers, body) = receiver.requests[0]
    assert headers["X-Hierarch-Event"] == "run.needs_attention"
    assert [item["run_id"] for item in json.loads(body)["needs_attention"]] == [str(leaf.pk)]

    document = api.get(f"/api/v1/runs/{root.pk}").json()
    (item,) = document["needs_attention"]
    assert (item["run_id"], item["reason"]["code"]) == (str(leaf.pk), "BUDGET_EXHAUSTED")
