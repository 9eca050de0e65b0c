"""The dashboard's share of `observability.metrics`: each entity's custom metrics aggregated as
it declares over the period, and the figures an entity does not track left out of its rows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard.selectors import PERIODS, dashboard_metrics
from entities.services import entity_save
from runs.models import Run, RunMetric
from tests.dashboard.builders import execution
from tests.factories import EntityFactory, definition

pytestmark = pytest.mark.smoke

NOW = datetime(2025, 3, 5, 14, 30, tzinfo=UTC)
DAY = PERIODS["24h"]


def declared(*metrics: tuple[str, str], **flags: bool) -> dict:
    return {
        "metrics": {
            "custom_metrics": [{"metric_name": n, "aggregation": a} for n, a in metrics],
            **flags,
        }
    }


def measured(entity, values: dict[str, float], *, at: datetime, trial: bool = False) -> Run:
    """A run of the entity ended at `at` whose output held these metrics."""
    run = execution(entity, ended=at, cost="0.10", tokens=10, ms=100)
    if trial:
        Run.objects.filter(pk=run.pk).update(trial=True)
    RunMetric.objects.bulk_create(
        RunMetric(
            run=run,
            workspace_id=entity.workspace_id,
            entity=entity,
            name=name,
            value=value,
            recorded_at=at,
        )
        for name, value in values.items()
    )
    return run


@pytest.fixture
def scorer(acme):
    return EntityFactory(
        workspace=acme,
        name="scorer",
        observability=declared(
            ("score", "AVG"), ("words", "SUM"), ("peak", "MAX"), ("low", "MIN"), ("hits", "COUNT")
        ),
    )


@pytest.fixture
def scored(scorer):
    hour = timedelta(hours=1)
    measured(scorer, {"score": 0.5, "words": 100, "peak": 3, "low": 3, "hits": 7}, at=NOW - hour)
    measured(scorer, {"score": 1.0, "words": 50, "peak": 9, "low": 1}, at=NOW - 2 * hour)
    measured(scorer, {"score": 0.0, "words": 1000}, at=NOW - 30 * hour)  # the period before
    measured(scorer, {"score": 100.0, "words": 1000}, at=NOW - hour, trial=True)  # a trial


def shown(data) -> dict[str, tuple[str, float, int]]:
    return {row.name: (row.aggregation, row.value, row.runs) for row in data.custom_metrics}


def test_it_aggregates_each_custom_metric_as_its_entity_declares(alice, scored):
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)

    assert shown(data) == {
        "score": ("AVG", 0.75, 2),
        "words": ("SUM", 150.0, 2),
        "peak": ("MAX", 9.0, 2),
        "low": ("MIN", 1.0, 2),
        "hits": ("COUNT", 1.0, 1),
    }
    assert {row.entity for row in data.custom_metrics} == {"scorer"}


def test_the_period_decides_which_runs_count(alice, scored):
    week = dashboard_metrics(user=alice, period=PERIODS["7d"], now=NOW)

    assert shown(week)["words"] == ("SUM", 1150.0, 3)


def test_a_metric_the_entity_no_longer_declares_is_left_out(alice, acme, scorer, scored):
    update = definition("scorer", observability=declared(("score", "MAX")))
    entity_save(workspace=acme, definition=update, entity=scorer)

    assert shown(dashboard_metrics(user=alice, period=DAY, now=NOW)) == {"score": ("MAX", 1.0, 2)}


def test_charlie_sees_no_metric_of_acme(charlie, scored):
    assert dashboard_metrics(user=charlie, period=DAY, now=NOW).custom_metrics == []


def test_with_an_entity_chosen_only_its_metrics_show(alice, acme, scorer, scored):
    other = EntityFactory(workspace=acme, name="other", observability=declared(("score", "SUM")))
    measured(other, {"score": 40}, at=NOW - timedelta(hours=1))

    mine = dashboard_metrics(user=alice, period=DAY, workspace=acme, entity=scorer, now=NOW)
    assert shown(mine)["score"] == ("AVG", 0.75, 2)
    theirs = dashboard_metrics(user=alice, period=DAY, workspace=acme, entity=other, now=NOW)
    assert shown(theirs) == {"score": ("SUM", 40.0, 1)}


def test_the_number_of_queries_does_not_grow_with_metrics(alice, acme, scorer):
    def queries() -> int:
        alice.__dict__.pop("_hierarch_workspace_ids", None)
        with CaptureQueriesContext(connection) as captured:
            dashboard_metrics(user=alice, period=DAY, now=NOW)
        return len(captured)

    measured(scorer, {"score": 1}, at=NOW - timedelta(hours=1))
    few = queries()
    for n in range(5):
        entity = EntityFactory(
            workspace=acme, name=f"many_{n}", observability=declared(("a", "SUM"), ("b", "AVG"))
        )
        for hours in range(1, 6):
            measured(entity, {"a": hours, "b": n}, at=NOW - timedelta(hours=hours))
    assert queries() == few
    assert len(dashboard_metrics(user=alice, period=DAY, now=NOW).custom_metrics) == 11


# The page


def page_text(response) -> str:
    return re.sub(r"\s+", " ", unescape(response.content.decode()))


def test_the_page_lists_the_custom_metrics(client, alice, acme):
    now = timezone.now()
    scorer = EntityFactory(
        workspace=acme, name="scorer", observability=declared(("quality.score", "AVG"))
    )
    measured(scorer, {"quality.score": 0.25}, at=now - timedelta(minutes=5))
    measured(scorer, {"quality.score": 0.5}, at=now - timedelta(minutes=6))

    client.force_login(alice)
    response = client.get(reverse("dashboard:index"))
    html = response.content.decode()
    assert 'id="dashboard-custom-metrics"' in html
    row = re.search(r'id="dashboard-custom-metrics".*?<tbody>(.*?)</tbody>', html, re.S)
    cells = [
        re.sub(r"<[^>]+>|\s+", " ", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)
    ]
    assert cells == ["scorer", "quality.score", "AVG", "0.375", "2"]


def test_the_page_has_no_custom_metrics_table_without_metrics(client, alice, acme):
    entity = EntityFactory(workspace=acme, name="plain")
    execution(entity, ended=timezone.now() - timedelta(minutes=5), cost="0.1", ms=10)

    client.force_login(alice)
    assert (
        'id="dashboard-custom-metrics"'
        not in client.get(reverse("dashboard:index")).content.decode()
    )


# track_latency, track_token_usage, track_cost


def test_an_entity_that_does_not_track_cost_shows_it_as_not_tracked_in_its_row(client, alice, acme):
    now = timezone.now()
    quiet = EntityFactory(workspace=acme, name="quiet", observability=declared(track_cost=False))
    loud = EntityFactory(workspace=acme, name="loud")
    execution(quiet, ended=now - timedelta(minutes=5), cost="0.70", tokens=30, ms=200)
    execution(loud, ended=now - timedelta(minutes=5), cost="0.30", tokens=10, ms=100)

    data = dashboard_metrics(user=alice, period=DAY)
    rows = {row.name: row.tracked for row in data.entities}
    assert rows["quiet"]["track_cost"] is False and rows["loud"]["track_cost"] is True
    # still counted for the workspace: budgets and the bill see every run
    assert data.current.cost == Decimal("1.00")

    client.force_login(alice)
    text = page_text(client.get(reverse("dashboard:index")))
    quiet_row = re.search(r"<tr> <td>quiet</td>(.*?)</tr>", text)[1]
    assert quiet_row.count("not tracked") == 2  # average cost and cost
    assert "$0.7" not in quiet_row
    loud_row = re.search(r"<tr> <td>loud</td>(.*?)</tr>", text)[1]
    assert "not tracked" not in loud_row and "$0.3</td>" in loud_row
    chart = re.search(r'id="chart-entities">(.*?)</figure>', text)[1]
    assert "loud" in chart and "quiet" not in chart


def test_a_chosen_entity_that_tracks_no_figure_shows_cards_saying_so(client, alice, acme):
    quiet = EntityFactory(
        workspace=acme,
        name="quiet",
        observability=declared(track_cost=False, track_latency=False, track_token_usage=False),
    )
    execution(quiet, ended=timezone.now() - timedelta(minutes=5), cost="0.70", tokens=30, ms=200)

    client.force_login(alice)
    response = client.get(reverse("dashboard:index"), {"entity": quiet.pk})
    assert response.status_code == 200
    text = page_text(response)
    for key, flag in (
        ("avg_cost", "track_cost"),
        ("p95_latency", "track_latency"),
        ("tokens_per_success", "track_token_usage"),
    ):
        card = re.search(rf'id="metric-{key}">(.*?)</div>', text)[1]
        assert "Not tracked" in card and f"turns {flag} off" in card
        assert f'id="chart-{key}"' not in text
    assert "$0.7" not in text
    assert 'id="chart-success_rate"' in text  # what it tracks still shows
