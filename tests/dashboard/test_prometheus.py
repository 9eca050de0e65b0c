"""/metrics: the instance's figures in Prometheus' text format after real runs, for a
scraper with the token or a staff member only, with no entity name in it."""

from __future__ import annotations

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from runs.models import LLMCall, Run, RunStatus
from tests.dashboard.builders import execution
from tests.factories import EntityFactory, UserFactory
from tests.support.runs import Driver, io

pytestmark = pytest.mark.smoke

METRICS = reverse("metrics")
TOKEN = "t" * 40


def samples(response) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value."""
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


@pytest.fixture
def token(settings):
    settings.HIERARCH_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, token: str = TOKEN):
    return client.get(METRICS, headers={"Authorization": f"Bearer {token}"})


# Who may read it


def test_it_refuses_an_anonymous_scrape_when_no_token_is_set(client):
    assert client.get(METRICS).status_code == 403
    assert scrape(client, "anything").status_code == 403


def test_it_refuses_a_missing_or_wrong_token(client, token):
    assert client.get(METRICS).status_code == 403
    assert scrape(client, "t" * 39 + "u").status_code == 403
    assert client.get(METRICS, headers={"Authorization": f"Token {TOKEN}"}).status_code == 403


def test_it_answers_the_token(client, token, db):
    assert scrape(client).status_code == 200


def test_it_refuses_a_signed_in_member_who_is_not_staff(client, alice):
    alice.is_staff = False
    alice.save(update_fields=["is_staff"])
    client.force_login(alice)
    assert client.get(METRICS).status_code == 403


def test_it_answers_a_signed_in_staff_member(client, db):
    client.force_login(UserFactory(username="ops", is_staff=True))
    assert client.get(METRICS).status_code == 200


# What it says


def test_it_counts_runs_calls_tokens_and_cost_after_some_runs(client, token, acme, globex):
    driver = Driver()
    child = EntityFactory(workspace=acme, name="secret_child", io_contract=io(None, a="string"))
    parent = EntityFactory(
        workspace=acme,
        name="secret_parent",
        type="SKILL",
        children=[child],
        io_contract=io(None, a="string"),
    )
    other = EntityFactory(workspace=globex, name="globex_thing", io_contract=io(None, b="string"))
    for _ in range(2):
        assert driver.run(parent, {}).status == RunStatus.COMPLETED
    assert driver.run(other, {}).status == RunStatus.COMPLETED
    execution(other, status=RunStatus.FAILED, ended=timezone.now(), cost="0.5", tokens=7)

    response = scrape(client)
    found = samples(response)
    body = response.content.decode()

    def acme_or_globex(name: str, slug: str, **labels: str) -> float:
        return found[(name, tuple(sorted({"workspace": slug, **labels}.items())))]

    assert (
        acme_or_globex("hierarch_runs", "acme", status="COMPLETED") == 4
    )  # two roots, two children
    assert acme_or_globex("hierarch_runs", "globex", status="COMPLETED") == 1
    assert acme_or_globex("hierarch_runs", "globex", status="FAILED") == 1
    acme_calls = LLMCall.objects.filter(run__workspace=acme).count()
    assert acme_calls >= 2  # one a child at least
    assert acme_or_globex("hierarch_model_calls_total", "acme") == acme_calls
    roots = Run.objects.filter(workspace=acme, parent__isnull=True)
    assert acme_or_globex("hierarch_tokens_total", "acme") == sum(r.total_tokens for r in roots)
    assert Decimal(str(acme_or_globex("hierarch_cost_usd_total", "acme"))) == sum(
        r.total_cost_usd for r in roots
    )
    assert acme_or_globex("hierarch_tokens_total", "globex") == sum(
        r.total_tokens for r in Run.objects.filter(workspace=globex)
    )
    # Instance-wide figures: no entity name, no run id.
    for name in ("secret_child", "secret_parent", "globex_thing"):
        assert name not in body
    assert str(Run.objects.first().pk) not in body


def test_the_queue_is_the_runs_pending_or_running_due_now(client, token, acme):
    entity = EntityFactory(workspace=acme, name="queued")
    execution(entity, status=RunStatus.PENDING)
    execution(entity, status=RunStatus.RUNNING)
    later = execution(entity, status=RunStatus.PENDING)  # a retry's backoff: not due yet
    Run.objects.filter(pk=later.pk).update(wake_at=timezone.now() + timedelta(minutes=5))
    execution(entity, status=RunStatus.WAITING)
    execution(entity, status=RunStatus.COMPLETED, ended=timezone.now())

    assert samples(scrape(client))[("hierarch_queue_depth", ())] == 2


def test_inline_workers_are_the_pools_threads(client, token, settings, db):
    settings.HIERARCH_EXECUTOR = "inline"
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 7}

    assert samples(scrape(client))[("hierarch_workers", (("executor", "inline"),))] == 7


def test_celery_workers_are_those_that_answer_a_ping_and_the_scrape_never_hangs(
    client, token, settings, db
):
    settings.HIERARCH_EXECUTOR = "celery"  # no worker runs in this test

    began = time.monotonic()
    found = samples(scrape(client))
    assert found[("hierarch_workers", (("executor", "celery"),))] == 0
    assert time.monotonic() - began < 10
