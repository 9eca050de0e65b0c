"""Webhooks with real Celery workers: the worker that ends a root run sends its webhook as a
Celery task, a failed attempt comes back after its backoff as another task (any worker may
take it), each attempt is sent once, and a worker killed while it sends leaves the attempt
to the sweeper (Celery beat), which sends it again."""

from __future__ import annotations

import json

import pytest

from runs.models import WebhookDelivery, WebhookStatus
from runs.services import run_execute
from runs.webhooks import webhook_secret
from tests.factories import UserFactory, grant
from tests.reliability.hierarchies import action, thought
from tests.reliability.processes import wait_for_the_end, wait_until
from tests.support.webhooks import Receiver, verified

pytestmark = pytest.mark.reliability

WEBHOOKS = {
    "HIERARCH_WEBHOOKS_ALLOW_PRIVATE": "1",  # the receiver is on loopback
    "HIERARCH_WEBHOOKS_BACKOFF_SECONDS": "0.3",
    "HIERARCH_WEBHOOKS_MAX_ATTEMPTS": "4",
    "HIERARCH_WEBHOOKS_TIMEOUT_SECONDS": "5",
}


@pytest.fixture
def allowed(settings):
    settings.HIERARCH_WEBHOOKS = {**settings.HIERARCH_WEBHOOKS, "ALLOW_PRIVATE": True}


def started(workspace, url: str):
    olive = grant(UserFactory(username="olive"), workspace, "operator")
    entity = action(workspace, "answer", thought(1, "Answer"))
    run, _ = run_execute(entity=entity, user=olive, input_data={}, webhook_url=url)
    return run


def test_two_workers_deliver_a_run_end_with_retries_each_attempt_once(
    processes, workspace, allowed
):
    processes.worker("w1", **WEBHOOKS)
    processes.worker("w2", **WEBHOOKS)
    with Receiver(fail_first=2) as receiver:
        run = started(workspace, receiver.url)
        assert wait_for_the_end(run, processes, timeout=30).status == "COMPLETED"
        delivered = wait_until(
            lambda: WebhookDelivery.objects.filter(run=run, status="DELIVERED").first(),
            timeout=30,
            what="the delivery",
            processes=processes,
        )
        processes.wait_idle()

    attempts = list(WebhookDelivery.objects.filter(run=run).order_by("attempt"))
    assert [(a.attempt, a.status, a.status_code) for a in attempts] == [
        (1, "FAILED", 500),
        (2, "FAILED", 500),
        (3, "DELIVERED", 204),
    ]
    assert delivered.attempt == 3
    assert len(receiver.requests) == 3  # each attempt sent once, by one worker
    headers, body = receiver.requests[-1]
    assert json.loads(body)["run_id"] == str(run.pk)
    assert verified(webhook_secret(workspace.pk), headers, body)
    log = processes.log("w1") + processes.log("w2")
    assert "runs.tasks.deliver_webhook" in log
    assert webhook_secret(workspace.pk) not in log


def test_an_attempt_whose_worker_was_killed_is_sent_again_by_the_sweeper(
    processes, workspace, allowed
):
    # The receiver holds the first POST long enough to kill the worker that sends it.
    first = processes.worker("first", **WEBHOOKS)
    with Receiver(delay=3.0) as receiver:
        run = started(workspace, receiver.url)
        wait_until(
            lambda: receiver.requests, timeout=30, what="the first POST", processes=processes
        )
        processes.kill(first)
        receiver.delay = 0.0
        attempt = WebhookDelivery.objects.get(run=run)
        assert attempt.status == WebhookStatus.SENDING
        # The claim lasts TIMEOUT_SECONDS + 30 s; let it lapse instead of waiting it out.
        WebhookDelivery.objects.filter(pk=attempt.pk).update(claimed_until=attempt.due_at)
        processes.worker("second", **WEBHOOKS)
        processes.beat(**WEBHOOKS)
        wait_until(
            lambda: WebhookDelivery.objects.filter(pk=attempt.pk, status="DELIVERED").exists(),
            timeout=30,
            what="the sweeper to send it again",
            processes=processes,
        )

    assert len(receiver.requests) == 2  # the killed worker's, then the sweeper's
    assert {h["X-Hierarch-Delivery"] for h, _ in receiver.requests} == {str(attempt.delivery_id)}
    assert WebhookDelivery.objects.filter(run=run).count() == 1
