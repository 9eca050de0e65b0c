"""The `Idempotency-Key` header on execute (seed 001): the same key and body answer the same
run and start nothing new; the same key with another body is a 409; keys belong to a user
in a workspace, expire, are kept only when a run started, and two identical requests at the
same moment start one run (real threads and connections: on PostgreSQL the key's unique index
decides, on SQLite its one writer at a time)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import IdempotencyKey, Run
from tests.api.checks import error_of
from tests.support.runs_api import GOOD_INPUT, execute_url, greeter, operator

BODY = {"input_data": GOOD_INPUT, "context": {"ticket": "T-1"}}


@pytest.fixture
def olive(acme):
    return operator(acme)


@pytest.fixture
def entity(acme):
    return greeter(acme)


def execute(api, entity, body=BODY, key="order-1001"):
    return api.post(execute_url(entity), body, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.smoke
def test_the_same_key_and_body_answer_the_same_run_and_start_nothing_new(api, olive, entity):
    api.force_login(olive)
    first = execute(api, entity)
    # The same body with its keys in another order is the same request.
    again = execute(
        api,
        entity,
        {"context": {"ticket": "T-1"}, "input_data": dict(reversed(GOOD_INPUT.items()))},
    )

    assert first.status_code == again.status_code == 202, (first.content, again.content)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Run.objects.count() == 1
    key = IdempotencyKey.objects.get()
    assert key.key == "order-1001" and str(key.run_id) == first.json()["run_id"]
    assert abs(key.expires_at - key.created_at - timedelta(hours=24)) < timedelta(seconds=5)


@pytest.mark.smoke
def test_the_same_key_with_another_body_is_a_conflict(api, olive, entity):
    api.force_login(olive)
    first = execute(api, entity).json()

    body = error_of(
        execute(api, entity, {**BODY, "input_data": {**GOOD_INPUT, "company_name": "Acme"}}),
        409,
        "IDEMPOTENCY_CONFLICT",
    )

    assert "order-1001" in body["error"]["message"]
    assert first["run_id"] in body["error"]["message"]
    assert body["retryable"] is False
    assert Run.objects.count() == 1


@pytest.mark.smoke
def test_the_same_key_on_another_entity_is_a_conflict(api, olive, entity, acme):
    api.force_login(olive)
    execute(api, entity)
    error_of(execute(api, greeter(acme, "twin")), 409, "IDEMPOTENCY_CONFLICT")
    assert Run.objects.count() == 1


@pytest.mark.smoke
def test_keys_belong_to_their_user(api, olive, entity, acme):
    api.force_login(olive)
    mine = execute(api, entity).json()
    api.force_login(operator(acme, "pat"))
    theirs = execute(api, entity).json()
    assert mine["run_id"] != theirs["run_id"]
    assert Run.objects.count() == 2


@pytest.mark.smoke
def test_an_expired_key_starts_a_new_run(api, olive, entity):
    api.force_login(olive)
    first = execute(api, entity).json()
    IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    again = execute(api, entity, {**BODY, "context": {"ticket": "T-2"}})

    assert again.status_code == 202, again.content
    assert again.json()["run_id"] != first["run_id"]
    assert "Idempotent-Replayed" not in again
    assert IdempotencyKey.objects.get().run_id == Run.objects.get(context={"ticket": "T-2"}).pk


@pytest.mark.smoke
def test_a_refused_request_keeps_no_key(api, olive, entity):
    api.force_login(olive)
    error_of(execute(api, entity, {"input_data": {"company_name": "X"}}), 400, "VALIDATION_ERROR")
    assert not IdempotencyKey.objects.exists()

    fixed = execute(api, entity)

    assert fixed.status_code == 202, fixed.content
    assert Run.objects.count() == 1


@pytest.mark.smoke
@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"])
def test_a_key_that_is_empty_too_long_or_not_ascii_is_refused(api, olive, entity, key):
    api.force_login(olive)
    details = error_of(execute(api, entity, key=key), 400, "VALIDATION_ERROR")["error"]["details"]
    assert "Idempotency-Key" in details
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_identical_requests_at_the_same_moment_start_one_run(acme):
    olive = operator(acme)
    entity = greeter(acme)
    callers = 6
    barrier = threading.Barrier(callers)
    answers: list = [None] * callers

    def call(index: int) -> None:
        client = APIClient()
        client.force_login(olive)
        barrier.wait()
        try:
            answers[index] = execute(client, entity, key="same-moment")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert all(answer is not None for answer in answers)
    assert {answer.status_code for answer in answers} == {202}, [a.content for a in answers]
    assert len({answer.json()["run_id"] for answer in answers}) == 1
    assert sum(answer.get("Idempotent-Replayed") == "true" for answer in answers) == callers - 1
    assert Run.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1
