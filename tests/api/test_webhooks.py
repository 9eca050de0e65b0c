"""Webhooks: a root run's end POSTed to its webhook_url, signed with the workspace's secret,
retried with backoff, every attempt recorded; the address checked again at delivery. The
receiver is a real HTTP server on loopback (so these tests allow private addresses unless
they check the refusal). Most runs are driven in the test thread and the attempts sent
here; the last tests go end to end through the API and the inline executor's threads."""

from __future__ import annotations

import json
import logging
import time

import pytest
from django.db import transaction

from governance.models import Secret
from runs.models import Run, WebhookDelivery, WebhookStatus
from runs.selectors import run_document
from runs.services import run_cancel, run_start
from runs.webhooks import (
    SECRET_NAME,
    signature,
    webhook_deliver,
    webhook_schedule,
    webhook_secret,
)
from tests.factories import UserFactory, grant, paused_run
from tests.support.queued_runs import Driver
from tests.support.runs_api import GOOD_INPUT, execute_url, greeter, operator, picker_process
from tests.support.webhooks import Receiver, verified


@pytest.fixture
def allow_private(settings):
    settings.HIERARCH_WEBHOOKS = {
        **settings.HIERARCH_WEBHOOKS,
        "ALLOW_PRIVATE": True,
        "BACKOFF_SECONDS": 0.05,
        "MAX_ATTEMPTS": 4,
        "TIMEOUT_SECONDS": 2.0,
    }
    return settings.HIERARCH_WEBHOOKS


def ended_with_webhook(entity, url: str, input_data=None) -> Run:
    """A run of the entity driven to its end in this thread, with a webhook: the engine's
    store writes the first attempt when the run ends."""
    driver = Driver()
    with transaction.atomic():
        run = run_start(entity=entity, input_data=input_data or GOOD_INPUT)
        Run.objects.filter(pk=run.pk).update(webhook_url=url)
    driver.queue.append(str(run.pk))
    driver.drain()
    run.refresh_from_db()
    return run


def send_all(run: Run) -> list[WebhookDelivery]:
    """Send every attempt of the run as it falls due, here; the attempts in order."""
    for _ in range(20):
        due = WebhookDelivery.objects.filter(run=run, status=WebhookStatus.PENDING).first()
        if due is None:
            break
        time.sleep(max(0.0, (due.due_at - due.created_at).total_seconds()))
        webhook_deliver(delivery_pk=due.pk)
    return list(WebhookDelivery.objects.filter(run=run).order_by("attempt"))


# -- the POST -----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_a_run_that_ends_posts_its_document_signed_with_the_workspace_secret(acme, allow_private):
    with Receiver() as receiver:
        run = ended_with_webhook(greeter(acme), receiver.url)
        assert run.status == "COMPLETED", run.error_message
        (attempt,) = send_all(run)

    assert attempt.status == WebhookStatus.DELIVERED and attempt.status_code == 204
    assert attempt.delivered_at and attempt.latency_ms is not None and attempt.error == ""
    assert attempt.event == "run.completed" and attempt.url == receiver.url
    ((headers, body),) = receiver.requests
    assert json.loads(body) == json.loads(json.dumps(run_document(run)))
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Hierarch-Event"] == "run.completed"
    assert headers["X-Hierarch-Delivery"] == str(attempt.delivery_id)
    assert headers["X-Hierarch-Attempt"] == "1"
    assert abs(int(headers["X-Hierarch-Timestamp"]) - time.time()) < 60
    assert verified(webhook_secret(acme.pk), headers, body)
    assert not verified("another secret", headers, body)


@pytest.mark.smoke
def test_the_admin_reads_the_secret_that_verifies_the_signature(api, acme, allow_private):
    ada = grant(UserFactory(username="ada"), acme, "admin")
    with Receiver() as receiver:
        send_all(ended_with_webhook(greeter(acme), receiver.url))
    api.force_login(ada)
    secret = api.get("/api/v1/workspaces/acme/webhook-secret").json()["secret"]
    ((headers, body),) = receiver.requests
    assert verified(secret, headers, body)
    assert signature(secret, body) == headers["X-Hierarch-Signature"]


@pytest.mark.smoke
def test_each_workspace_signs_with_its_own_secret_made_once_and_kept(acme, globex):
    first = webhook_secret(acme.pk)
    again = webhook_secret(acme.pk)  # read back from the vault, not made anew

    assert first.startswith("whsec_")
    assert again == first
    assert Secret.objects.filter(workspace=acme, name=SECRET_NAME).count() == 1
    assert webhook_secret(globex.pk) != first


@pytest.mark.smoke
def test_a_failed_run_and_a_cancelled_run_say_so(acme, allow_private):
    with Receiver() as receiver:
        failed = ended_with_webhook(greeter(acme), receiver.url, {"company_name": "X"})
        assert failed.status == "FAILED"
        send_all(failed)
        waiting = paused_run(greeter(acme, "waiter"), webhook_url=receiver.url)
        run_cancel(run=waiting)
        driver = Driver()
        driver.queue.append(str(waiting.pk))
        driver.drain()
        waiting.refresh_from_db()
        assert waiting.status == "CANCELLED"
        send_all(waiting)

    events = [headers["X-Hierarch-Event"] for headers, _ in receiver.requests]
    assert events == ["run.failed", "run.cancelled"]
    assert json.loads(receiver.requests[0][1])["error"]["code"] == "INVALID_INPUT"


@pytest.mark.smoke
def test_only_the_root_run_posts_and_a_run_without_a_webhook_posts_nothing(acme, allow_private):
    process = picker_process(acme)
    with Receiver() as receiver:
        run = ended_with_webhook(process, receiver.url, {})
        plain = Driver().run(greeter(acme), GOOD_INPUT)
        send_all(run)
    assert run.status == plain.status == "COMPLETED"
    assert WebhookDelivery.objects.get().run_id == run.pk  # not the child, not the plain run
    assert len(receiver.requests) == 1


# -- retries ------------------------------------------------------------------------------------


@pytest.mark.smoke
def test_failed_attempts_are_retried_with_backoff_and_every_one_is_recorded(acme, allow_private):
    with Receiver(fail_first=2) as receiver:
        attempts = send_all(ended_with_webhook(greeter(acme), receiver.url))

    assert [(a.attempt, a.status, a.status_code) for a in attempts] == [
        (1, "FAILED", 500),
        (2, "FAILED", 500),
        (3, "DELIVERED", 204),
    ]
    assert attempts[0].error == "127.0.0.1 answered 500"
    assert len({a.delivery_id for a in attempts}) == 1
    first, second = attempts[0], attempts[1]
    # The backoff doubles: 0.05 s after the first failure, 0.1 s after the second.
    assert abs((first.next_attempt_at - first.attempted_at).total_seconds() - 0.05) < 0.01
    assert abs((second.next_attempt_at - second.attempted_at).total_seconds() - 0.1) < 0.01
    assert second.due_at == first.next_attempt_at
    assert attempts[2].next_attempt_at is None
    sent = [headers for headers, _ in receiver.requests]
    assert [h["X-Hierarch-Attempt"] for h in sent] == ["1", "2", "3"]
    assert len({h["X-Hierarch-Delivery"] for h in sent}) == 1


@pytest.mark.smoke
def test_it_gives_up_after_the_last_attempt(acme, allow_private):
    with Receiver(fail_first=100) as receiver:
        attempts = send_all(ended_with_webhook(greeter(acme), receiver.url))
    assert [a.status for a in attempts] == ["FAILED"] * 4
    assert attempts[-1].next_attempt_at is None
    assert len(receiver.requests) == 4


@pytest.mark.smoke
def test_a_receiver_that_does_not_answer_in_time_is_a_failed_attempt(acme, allow_private, settings):
    settings.HIERARCH_WEBHOOKS = {**allow_private, "TIMEOUT_SECONDS": 0.2, "MAX_ATTEMPTS": 1}
    with Receiver(delay=1.0) as receiver:
        (attempt,) = send_all(ended_with_webhook(greeter(acme), receiver.url))
    assert attempt.status == "FAILED" and attempt.status_code is None
    assert attempt.error == "127.0.0.1 did not answer within 0.2 s"


@pytest.mark.smoke
def test_an_attempt_is_sent_once_however_many_hints_arrive(acme, allow_private):
    with Receiver() as receiver:
        run = ended_with_webhook(greeter(acme), receiver.url)
        attempt = WebhookDelivery.objects.get(run=run)
        assert webhook_deliver(delivery_pk=attempt.pk) is not None
        assert webhook_deliver(delivery_pk=attempt.pk) is None
    assert len(receiver.requests) == 1


# -- addresses and secrets ----------------------------------------------------------------------


@pytest.mark.smoke
def test_an_address_that_became_private_is_refused_at_delivery(acme, allow_private, settings):
    with Receiver() as receiver:
        run = ended_with_webhook(greeter(acme), receiver.url)
        # Allowed when the run started; not any more when it ended (or the name now resolves
        # to an inside address): nothing is sent, and it is not retried.
        settings.HIERARCH_WEBHOOKS = {**allow_private, "ALLOW_PRIVATE": False}
        (attempt,) = send_all(run)
    assert receiver.requests == []
    assert attempt.status == "FAILED" and attempt.status_code is None
    assert "127.0.0.1" in attempt.error and "loopback" in attempt.error


@pytest.mark.smoke
def test_the_secret_never_appears_in_an_error_or_the_log(acme, allow_private, caplog):
    caplog.set_level(logging.DEBUG)
    secret = webhook_secret(acme.pk)
    with Receiver(fail_first=100) as receiver:
        attempts = send_all(ended_with_webhook(greeter(acme), receiver.url))
    assert all(a.error for a in attempts)
    assert not any(secret in a.error for a in attempts)
    assert secret not in caplog.text
    assert "source=test" not in " ".join(a.error for a in attempts)  # the URL's query neither


@pytest.mark.smoke
def test_a_schedule_for_a_status_that_is_not_an_end_sends_nothing(acme):
    run = paused_run(greeter(acme), webhook_url="http://127.0.0.1:9/x")
    assert webhook_schedule(run_id=str(run.pk), url=run.webhook_url, status="PAUSED") is None
    assert not WebhookDelivery.objects.exists()


# -- end to end: the API, the inline executor, the timer threads --------------------------------


def wait_for(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.django_db(transaction=True)
def test_an_executed_run_posts_its_end_and_retries_in_the_background(api, acme, settings):
    settings.HIERARCH_EXECUTOR = "inline"
    settings.HIERARCH_WEBHOOKS = {
        **settings.HIERARCH_WEBHOOKS,
        "ALLOW_PRIVATE": True,
        "BACKOFF_SECONDS": 0.1,
        "MAX_ATTEMPTS": 3,
    }
    api.force_login(operator(acme))
    entity = greeter(acme)
    with Receiver(fail_first=1) as receiver:
        answer = api.post(
            execute_url(entity),
            {"input_data": GOOD_INPUT, "execution_options": {"webhook_url": receiver.url}},
        )
        assert answer.status_code == 202, answer.content
        delivered = wait_for(
            lambda: WebhookDelivery.objects.filter(status=WebhookStatus.DELIVERED).first()
        )

    run = Run.objects.get(pk=answer.json()["run_id"])
    assert run.status == "COMPLETED"
    assert delivered.run_id == run.pk and delivered.attempt == 2
    assert list(WebhookDelivery.objects.values_list("status", flat=True).order_by("attempt")) == [
        "FAILED",
        "DELIVERED",
    ]
    body = receiver.requests[-1][1]
    assert json.loads(body)["run_id"] == str(run.pk)
    assert json.loads(body)["status"] == "COMPLETED"
    assert verified(webhook_secret(acme.pk), receiver.requests[-1][0], body)
