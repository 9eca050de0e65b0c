"""The dashboard page: what each person sees, the filters and their errors, the charts, the
alerts, the empty state, the htmx panel."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalStatus
from governance.models import Alert, AlertKind, AlertSeverity
from runs.models import RunStatus
from tests.dashboard.builders import decided, execution
from tests.factories import EntityFactory, approval_request

pytestmark = pytest.mark.smoke

PAGE = reverse("dashboard:index")
PANEL = reverse("dashboard:panel")
HTMX = {"HX-Request": "true"}


def aria_labels(response) -> list[str]:
    return [
        unescape(label)
        for label in re.findall(r'<svg class="chart"[^>]*aria-label="([^"]*)"', page(response))
    ]


def page(response) -> str:
    return response.content.decode()


def metric(response, key: str) -> str:
    match = re.search(rf'id="metric-{key}">(.*?)</div>', page(response), re.S)
    assert match, f"no card {key}"
    return re.sub(r"\s+", " ", unescape(match.group(1)))


@pytest.fixture
def writer(acme):
    return EntityFactory(workspace=acme, name="writer")


@pytest.fixture
def mailer(globex):
    return EntityFactory(workspace=globex, name="mailer")


@pytest.fixture
def recent(writer):
    """Three finished runs of Acme's writer in the last hours, one of them failed, and a
    run the day before that failed."""
    now = timezone.now()
    execution(writer, ended=now - timedelta(minutes=1), cost="0.20", tokens=120, ms=1200)
    execution(writer, ended=now - timedelta(hours=2), cost="0.40", tokens=80, ms=800)
    execution(writer, status=RunStatus.FAILED, ended=now - timedelta(hours=3), cost="0", ms=50)
    return execution(writer, status=RunStatus.FAILED, ended=now - timedelta(hours=30), ms=10)


def test_it_sends_anonymous_visitors_to_sign_in(client):
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_it_shows_the_key_metrics_with_the_change_against_the_period_before(client, alice, recent):
    client.force_login(alice)
    response = client.get(PAGE)
    assert response.status_code == 200
    success = metric(response, "success_rate")
    assert "66.7 %" in success
    assert "2 of 3 finished executions completed" in success
    assert "+66.7 pts" in success and "vs 0.0 %" in success
    assert "change-good" in success
    assert "$0.2" in metric(response, "avg_cost")  # (0.20 + 0.40 + 0) / 3
    assert "100" in metric(response, "tokens_per_success")  # (120 + 80) / 2
    assert "1.16 s" in metric(response, "p95_latency")  # percentile_cont of 50, 800, 1200
    assert "All your workspaces · Last 24 hours, by hour" in re.sub(r"\s+", " ", page(response))


def test_it_draws_a_chart_per_metric_with_its_numbers_in_words(client, alice, recent):
    client.force_login(alice)
    response = client.get(PAGE)
    labels = aria_labels(response)
    # Four metrics, runs by status, cost by entity; no request was decided.
    assert len(labels) == 6
    assert "No request was decided in this period." in page(response)
    success = next(label for label in labels if label.startswith("Success rate"))
    assert "3 of 24 hours measured" in success
    assert "lowest 0 %" in success and "highest 100 %" in success
    statuses = next(label for label in labels if label.startswith("Runs by status"))
    assert "3 runs (2 completed, 1 failed)" in statuses
    entities = next(label for label in labels if label.startswith("Cost by entity"))
    assert "the most, $0.6, writer" in entities
    assert 'role="img"' in page(response)
    assert page(response).count("<circle") >= 3 + 3 + 3 + 2  # a point per measured hour
    assert "<title>" in page(response)


def test_it_says_no_runs_in_this_period_instead_of_an_empty_chart(client, alice, writer):
    client.force_login(alice)
    response = client.get(PAGE)
    assert response.status_code == 200
    assert aria_labels(response) == []
    assert page(response).count("No runs in this period.") == 5
    assert "No request was decided in this period." in page(response)
    assert "nothing to compare with the period before" in page(response)
    assert "No open alert." in page(response)


def test_it_narrows_to_a_workspace_an_entity_and_a_period(client, alice, acme, writer, recent):
    other = EntityFactory(workspace=acme, name="other")
    execution(other, ended=timezone.now() - timedelta(days=3), cost="9", ms=10)
    client.force_login(alice)
    week = client.get(PAGE, {"period": "7d"})
    assert "Last 7 days, by day" in page(week)
    assert "4 of 5 finished executions" not in page(week)
    assert "3 of 5 finished executions completed" in metric(week, "success_rate")
    assert any("of 7 days measured" in label for label in aria_labels(week))

    one = client.get(PAGE, {"workspace": acme.pk, "entity": other.pk, "period": "7d"})
    assert one.status_code == 200
    assert "1 of 1 finished executions completed" in metric(one, "success_rate")
    assert "other in Acme" in page(one)
    assert 'id="chart-entities"' not in page(one)  # nothing to rank with one entity


def test_it_refuses_a_period_it_does_not_know_at_the_field(client, alice, recent):
    client.force_login(alice)
    response = client.get(PAGE, {"period": "1y"})
    assert response.status_code == 422
    assert 'id="id_period_error"' in page(response)
    assert "1y is not a period; use one of 24h, 7d, 30d." in page(response)
    assert 'id="metric-success_rate"' not in page(response)


def test_another_workspaces_id_is_a_field_error_that_shows_nothing_of_it(
    client, alice, globex, mailer
):
    execution(mailer, ended=timezone.now(), cost="3", ms=10)
    client.force_login(alice)
    response = client.get(PAGE, {"workspace": globex.pk})
    assert response.status_code == 422
    assert f"There is no workspace {globex.pk} among yours" in page(response)
    assert "Globex" not in page(response)
    assert "mailer" not in page(response)
    entity = client.get(PAGE, {"entity": mailer.pk})
    assert entity.status_code == 422
    assert "There is no entity with this id among the ones you can see." in page(entity)
    assert "mailer" not in page(entity).replace(str(mailer.pk), "")
    garbage = client.get(PAGE, {"workspace": "x", "entity": "not-a-uuid"})
    assert garbage.status_code == 422
    assert "There is no workspace x among yours" in page(garbage)


def test_an_entity_of_another_of_my_workspaces_is_named_at_the_field(client, alice, globex, acme):
    from tests.factories import grant

    grant(alice, globex, "viewer")
    theirs = EntityFactory(workspace=globex, name="mailer")
    client.force_login(alice)
    response = client.get(PAGE, {"workspace": acme.pk, "entity": theirs.pk})
    assert response.status_code == 422
    assert "mailer is an entity of Globex, not of Acme." in page(response)
    # The page says which workspace its entity list was for: a workspace just picked lets
    # the entity of the one before go.
    switched = client.get(
        PAGE, {"workspace": acme.pk, "entity": theirs.pk, "entities_of": globex.pk}
    )
    assert switched.status_code == 200
    assert "All your workspaces" not in page(switched) and "Acme" in page(switched)


def test_the_entity_picker_suggests_only_the_chosen_workspaces_entities(
    client, alice, globex, acme, writer
):
    from tests.factories import grant

    grant(alice, globex, "viewer")
    EntityFactory(workspace=globex, name="mailer")
    client.force_login(alice)
    every = page(client.get(PAGE))
    assert 'hx-get="/runs/entities/"' in every and '<select name="entity"' not in every
    suggest = {"entity": "", "list": "id_entity-suggestions"}
    every = page(client.get("/runs/entities/", suggest))
    assert "writer (Acme)" in every and "mailer (Globex)" in every
    narrowed = page(client.get("/runs/entities/", {**suggest, "workspace": acme.pk}))
    assert "writer (Acme)" in narrowed and "mailer" not in narrowed


def test_charlie_sees_nothing_of_acme(client, charlie, recent, acme):
    Alert.objects.create(workspace=acme, kind=AlertKind.QUOTA, key="q", message="acme quota")
    client.force_login(charlie)
    response = client.get(PAGE)
    assert response.status_code == 200
    assert "writer" not in page(response)
    assert "acme quota" not in page(response)
    assert page(response).count("No runs in this period.") == 5


def test_it_lists_the_open_alerts_escaped(client, alice, acme, writer):
    Alert.objects.create(
        workspace=acme,
        kind=AlertKind.COST_SPIKE,
        key="spike",
        entity=writer,
        severity=AlertSeverity.CRITICAL,
        message="<script>alert(1)</script> cost $9, more than 2x its average",
    )
    Alert.objects.create(
        workspace=acme,
        kind=AlertKind.QUOTA,
        key="seen",
        message="already acknowledged",
        acknowledged_at=timezone.now(),
    )
    client.force_login(alice)
    html = page(client.get(PAGE))
    alerts = re.search(r'id="dashboard-alerts".*?</section>', html, re.S).group(0)
    assert "Cost spike" in alerts and "Critical" in alerts and "writer" in alerts
    assert "&lt;script&gt;alert(1)&lt;/script&gt; cost $9" in alerts
    assert "<script>alert(1)" not in html
    assert "already acknowledged" not in html


def test_an_entity_name_is_escaped_in_the_charts(client, alice, acme):
    sly = EntityFactory(workspace=acme, name="sly")
    from entities.models import Entity

    Entity.objects.filter(pk=sly.pk).update(name='<img src=x onerror="alert(1)">')
    execution(sly, ended=timezone.now(), cost="1", ms=5)
    client.force_login(alice)
    html = page(client.get(PAGE))
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


def test_it_shows_the_approval_rate_and_the_open_queue(client, alice, writer):
    run = execution(writer, status=RunStatus.PAUSED, started=timezone.now())
    at = timezone.now()
    decided(run, ApprovalStatus.APPROVED, "edit", at=at)
    decided(run, ApprovalStatus.TIMEOUT, at=at)
    approval_request(run)
    client.force_login(alice)
    response = client.get(PAGE)
    rate = metric(response, "approval_rate")
    assert "50.0 %" in rate
    assert "1 of 2 decided requests approved (1 edited, 0 with a constraint)" in rate
    assert "1 timed out" in rate
    assert "1" in metric(response, "queue_depth")
    assert "a request that timed out counts as not approved" in page(response)


def test_the_panel_answers_htmx_with_the_filters_in_the_address_bar(client, alice, acme, recent):
    client.force_login(alice)
    response = client.get(PANEL, {"workspace": acme.pk, "period": "30d"}, headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Push-Url"] == f"{PAGE}?workspace={acme.pk}&period=30d"
    html = page(response)
    assert html.lstrip().startswith('<div id="dashboard-panel"')
    assert "<html" not in html
    assert "Last 30 days, by day" in html
    default = client.get(PANEL, {"period": "24h"}, headers=HTMX)
    assert default["HX-Push-Url"] == PAGE
    refused = client.get(PANEL, {"period": "forever"}, headers=HTMX)
    assert refused.status_code == 422
    assert "HX-Push-Url" not in refused
    assert "forever is not a period" in page(refused)
