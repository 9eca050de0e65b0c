"""The dashboard's numbers against runs and requests with known statuses, costs, times, tokens
and decisions. Smoke: on SQLite the P95s are taken in Python, on PostgreSQL with
percentile_cont; the same expected numbers hold on both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import ApprovalStatus
from dashboard import selectors
from dashboard.selectors import PERIODS, dashboard_metrics, percentile_cont, window_for
from governance.models import Alert, AlertKind
from runs.models import Run, RunStatus
from tests.dashboard.builders import decided, execution
from tests.factories import EntityFactory, approval_request

pytestmark = pytest.mark.smoke

NOW = datetime(2025, 3, 5, 14, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = PERIODS["24h"]


@pytest.fixture
def writer(acme):
    return EntityFactory(workspace=acme, name="writer")


@pytest.fixture
def editor(acme):
    return EntityFactory(workspace=acme, name="editor")


@pytest.fixture
def mailer(globex):
    return EntityFactory(workspace=globex, name="mailer")


@pytest.fixture
def acme_runs(writer, editor):
    """In the last 24 hours: four finished root runs of the writer (two completed, one
    failed, one cancelled), one still running, and an editor run as the writer's child.
    The day before: one failed run."""
    ended = NOW - timedelta(minutes=10)  # the 14:00 bucket
    first = execution(writer, ended=ended, cost="0.10", tokens=100, ms=1000)
    execution(writer, ended=ended - HOUR, cost="0.30", tokens=300, ms=2000)  # 13:00
    execution(writer, status=RunStatus.FAILED, ended=ended, cost="0.20", tokens=50, ms=3000)
    execution(writer, status=RunStatus.CANCELLED, ended=ended, cost="0", tokens=0, ms=4000)
    execution(writer, status=RunStatus.RUNNING, started=ended, cost="5", tokens=9999)
    execution(
        editor, ended=ended, cost="0.05", tokens=40, ms=500, parent=first
    )  # a child: in the writer's numbers already
    execution(writer, status=RunStatus.FAILED, ended=NOW - 30 * HOUR, cost="1", ms=8000)
    return first


def test_the_window_is_the_periods_buckets_ending_with_the_one_that_holds_now():
    window = window_for(PERIODS["24h"], NOW)
    assert len(window.buckets) == 24
    assert window.buckets[-1] == datetime(2025, 3, 5, 14, tzinfo=UTC)
    assert window.start == datetime(2025, 3, 4, 15, tzinfo=UTC)
    assert window.end == datetime(2025, 3, 5, 15, tzinfo=UTC)
    assert window.previous_start == datetime(2025, 3, 3, 15, tzinfo=UTC)
    week = window_for(PERIODS["7d"], NOW)
    assert len(week.buckets) == 7
    assert week.buckets[0] == datetime(2025, 2, 27, tzinfo=UTC)
    assert week.end == datetime(2025, 3, 6, tzinfo=UTC)
    assert len(window_for(PERIODS["30d"], NOW).buckets) == 30


def test_percentile_cont_interpolates_between_the_closest_ranks():
    assert percentile_cont([1000, 2000, 3000, 4000], 0.95) == pytest.approx(3850)
    assert percentile_cont([7], 0.95) == 7
    assert percentile_cont([], 0.95) is None
    assert percentile_cont(range(1, 101), 0.5) == pytest.approx(50.5)


def test_it_computes_the_key_metrics_of_finished_root_runs(alice, acme_runs):
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    now = data.current
    assert (now.finished, now.completed) == (4, 2)
    assert now.success_rate == 50
    assert now.avg_cost == Decimal("0.15")  # (0.10 + 0.30 + 0.20 + 0) / 4
    assert now.tokens_per_success == 200  # (100 + 300) / 2
    assert now.p95_ms == pytest.approx(3850)  # percentile_cont of 1000, 2000, 3000, 4000
    before = data.previous
    assert (before.finished, before.completed, before.success_rate) == (1, 0, 0)
    assert before.avg_cost == Decimal(1)
    assert before.p95_ms == pytest.approx(8000)


def test_it_buckets_runs_by_the_hour_they_ended(alice, acme_runs):
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    at_two, at_one = datetime(2025, 3, 5, 14, tzinfo=UTC), datetime(2025, 3, 5, 13, tzinfo=UTC)
    assert set(data.buckets) == {at_two, at_one}
    two = data.buckets[at_two]
    assert (two.finished, two.completed, two.cost) == (3, 1, Decimal("0.30"))
    assert two.p95_ms == pytest.approx(3900)  # of 1000, 3000, 4000
    one = data.buckets[at_one]
    assert (one.finished, one.success_rate, one.tokens_per_success) == (1, 100, 300)
    assert one.p95_ms == pytest.approx(2000)


def test_it_buckets_by_the_day_over_seven_days(alice, writer):
    execution(writer, ended=NOW - timedelta(days=3), cost="0.5", tokens=10, ms=100)
    execution(writer, ended=NOW - timedelta(days=3, hours=1), cost="1.5", tokens=30, ms=300)
    execution(writer, ended=NOW - timedelta(days=8), ms=100)  # the week before
    data = dashboard_metrics(user=alice, period=PERIODS["7d"], now=NOW)
    assert list(data.buckets) == [datetime(2025, 3, 2, tzinfo=UTC)]
    (day,) = data.buckets.values()
    assert (day.finished, day.avg_cost, day.tokens_per_success) == (2, Decimal(1), 20)
    assert day.p95_ms == pytest.approx(290)
    assert data.previous.finished == 1


def test_it_counts_runs_by_status_in_the_hour_they_started(alice, acme_runs):
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    assert data.statuses[datetime(2025, 3, 5, 14, tzinfo=UTC)] == {
        "COMPLETED": 1,
        "FAILED": 1,
        "CANCELLED": 1,
        "RUNNING": 1,
    }
    assert data.statuses[datetime(2025, 3, 5, 13, tzinfo=UTC)] == {"COMPLETED": 1}


def test_it_narrows_to_one_entity_counting_its_runs_as_a_child_too(alice, acme, acme_runs):
    editor = acme_runs.children.get().entity
    data = dashboard_metrics(user=alice, period=DAY, workspace=acme, entity=editor, now=NOW)
    assert (data.current.finished, data.current.completed) == (1, 1)
    assert data.current.avg_cost == Decimal("0.05")
    assert data.current.p95_ms == pytest.approx(500)
    assert data.entities == []  # one entity: nothing to rank


def test_it_ranks_entities_by_cost_with_their_own_metrics(alice, acme, acme_runs, writer):
    other = EntityFactory(workspace=acme, name="summariser")
    execution(other, ended=NOW - HOUR, cost="2", tokens=10, ms=700)
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    assert [row.name for row in data.entities] == ["summariser", "writer"]
    summariser, written = data.entities
    assert (summariser.tally.cost, summariser.tally.p95_ms) == (Decimal(2), pytest.approx(700))
    assert (written.tally.finished, written.tally.success_rate) == (4, 50)
    assert written.tally.p95_ms == pytest.approx(3850)
    assert written.workspace == "Acme"


def test_it_rates_approvals_counting_edits_and_constraints_as_approved(alice, acme_runs):
    at = NOW - timedelta(minutes=5)
    decided(acme_runs, ApprovalStatus.APPROVED, "approve", at=at)
    decided(acme_runs, ApprovalStatus.APPROVED, "edit", at=at)
    decided(acme_runs, ApprovalStatus.APPROVED, "lock_constraint", at=at - HOUR)
    decided(acme_runs, ApprovalStatus.REJECTED, "reject", at=at)
    decided(acme_runs, ApprovalStatus.TIMEOUT, at=at)
    decided(acme_runs, ApprovalStatus.NOTIFIED, at=at)  # not a decision
    decided(acme_runs, ApprovalStatus.CANCELLED, at=at)  # not a decision
    decided(acme_runs, ApprovalStatus.REJECTED, "reject", at=NOW - 30 * HOUR)  # day before
    approval_request(acme_runs)  # waiting
    approval_request(acme_runs, status=ApprovalStatus.ESCALATED)  # waiting on an admin
    approval_request(acme_runs, approval_required=False)  # only a notification

    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    hitl = data.approvals
    assert (hitl.decided, hitl.approved, hitl.edited, hitl.locked) == (5, 3, 1, 1)
    assert (hitl.rejected, hitl.timed_out) == (1, 1)
    assert hitl.approval_rate == 60
    assert data.approvals_previous.approval_rate == 0
    assert data.approval_buckets[datetime(2025, 3, 5, 13, tzinfo=UTC)].approval_rate == 100
    assert data.approval_buckets[datetime(2025, 3, 5, 14, tzinfo=UTC)].approval_rate == 50
    assert data.queue_depth == 2


def test_charlie_sees_nothing_of_acme(charlie, acme_runs, mailer):
    execution(mailer, status=RunStatus.FAILED, ended=NOW - HOUR, cost="0.7", ms=90)
    decided(acme_runs, ApprovalStatus.APPROVED, "approve", at=NOW - HOUR)
    approval_request(acme_runs)
    Alert.objects.create(workspace=acme_runs.workspace, kind=AlertKind.QUOTA, key="q", message="m")
    data = dashboard_metrics(user=charlie, period=DAY, now=NOW)
    assert (data.current.finished, data.current.success_rate) == (1, 0)
    assert data.current.avg_cost == Decimal("0.7")
    assert data.previous.finished == 0
    assert [row.name for row in data.entities] == ["mailer"]
    assert (data.approvals.decided, data.queue_depth, data.alerts) == (0, 0, [])
    assert sum(n for bucket in data.statuses.values() for n in bucket.values()) == 1


def test_a_superuser_sees_every_workspace(root, acme_runs, mailer):
    execution(mailer, ended=NOW - HOUR, ms=90)
    data = dashboard_metrics(user=root, period=DAY, now=NOW)
    assert data.current.finished == 5


def test_it_lists_the_open_alerts_newest_first(alice, acme, globex, writer):
    def alert(workspace, key, minutes_ago, **fields):
        made = Alert.objects.create(
            workspace=workspace, kind=AlertKind.FAILURE_SPIKE, key=key, message=key, **fields
        )
        Alert.objects.filter(pk=made.pk).update(
            created_at=timezone.now() - timedelta(minutes=minutes_ago)
        )
        return made

    older = alert(acme, "older", 30)
    newer = alert(acme, "newer", 5, entity=writer)
    alert(acme, "seen", 1, acknowledged_at=timezone.now())
    alert(globex, "theirs", 1)
    data = dashboard_metrics(user=alice, period=DAY)
    assert [a.pk for a in data.alerts] == [newer.pk, older.pk]
    other = EntityFactory(workspace=acme, name="other")
    # With an entity chosen: its own alerts and the workspace's, not another entity's.
    narrowed = dashboard_metrics(user=alice, period=DAY, workspace=acme, entity=other)
    assert [a.pk for a in narrowed.alerts] == [older.pk]


def test_the_number_of_queries_does_not_grow_with_runs_entities_or_buckets(alice, acme):
    def queries(period) -> int:
        alice.__dict__.pop("_hierarch_workspace_ids", None)
        with CaptureQueriesContext(connection) as captured:
            dashboard_metrics(user=alice, period=PERIODS[period], now=NOW)
        return len(captured)

    small = EntityFactory(workspace=acme, name="small")
    execution(small, ended=NOW - HOUR, ms=10)
    few = queries("24h")
    for n in range(6):
        entity = EntityFactory(workspace=acme, name=f"many_{n}")
        for hours in range(1, 30, 3):
            run = execution(entity, ended=NOW - hours * HOUR, cost="0.01", tokens=5, ms=hours)
            decided(run, ApprovalStatus.APPROVED, "approve", at=NOW - hours * HOUR)
    assert queries("24h") == few
    assert queries("30d") == few
    assert few <= 10  # the tenth: the custom metrics' GROUP BY


def test_the_python_p95_reads_at_most_a_sample_of_the_times(writer, monkeypatch):
    # SQLite's path (it runs on any database): the counts stay exact, the P95 is taken from
    # at most P95_SAMPLE_MAX times.
    for ms in (100, 200, 300, 400, 500):
        execution(writer, ended=NOW - HOUR, ms=ms)
    window = window_for(DAY, NOW)
    finished = Run.objects.filter(completed_at__gte=window.previous_start).annotate(
        bucket=selectors.BucketIndex("completed_at", origin=window.previous_start, step=HOUR)
    )
    bucket = {window.buckets[-2]: selectors.RunTally(finished=5)}
    current, previous, per_entity = selectors.RunTally(), selectors.RunTally(), {}

    assert not selectors._p95_in_python(finished, window, bucket, current, previous, per_entity)
    assert current.p95_ms == pytest.approx(480)
    assert bucket[window.buckets[-2]].p95_ms == pytest.approx(480)
    assert per_entity == {writer.pk: pytest.approx(480)}
    assert previous.p95_ms is None

    monkeypatch.setattr(selectors, "P95_SAMPLE_MAX", 3)
    assert selectors._p95_in_python(finished, window, bucket, current, previous, per_entity)
    assert 100 <= current.p95_ms <= 500


def test_a_run_ending_on_the_hour_counts_in_the_hour_that_begins(alice, writer):
    execution(writer, ended=datetime(2025, 3, 5, 14, tzinfo=UTC), ms=10)
    execution(writer, ended=datetime(2025, 3, 5, 13, 59, 59, 999_999, tzinfo=UTC), ms=20)
    execution(writer, ended=datetime(2025, 3, 4, 15, tzinfo=UTC), ms=30)  # the first bucket
    execution(writer, ended=datetime(2025, 3, 4, 14, 59, 59, tzinfo=UTC), ms=40)  # before
    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    assert {moment.hour: t.p95_ms for moment, t in data.buckets.items()} == {14: 10, 13: 20, 15: 30}
    assert (data.current.finished, data.previous.finished) == (3, 1)


def test_the_p95_run_time_leaves_out_an_hour_waiting_on_a_person(alice, dave, writer, editor):
    """The writer's run waits on its editor child, which waits an hour on an approver: the
    decision records the hour on the child and on the root, and the dashboard's run time is
    what is left (2 s), not 1 h 2 s."""
    from approvals.services import approval_decide
    from dashboard.cards import headline_cards

    ended = NOW - timedelta(minutes=10)
    execution(writer, ended=ended, ms=1000)  # did not wait
    root = execution(writer, status=RunStatus.WAITING, started=ended - HOUR)
    child = execution(editor, status=RunStatus.PAUSED, parent=root, started=ended - HOUR)
    Run.objects.filter(pk=child.pk).update(lineage=[str(root.pk)])
    approval = approval_request(child, resume_status=RunStatus.RUNNING)
    asked = timezone.now() - HOUR
    type(approval).objects.filter(pk=approval.pk).update(requested_at=asked)
    approval.refresh_from_db()
    approval_decide(approval=approval, user=dave, decision="approve")

    waits = dict(Run.objects.filter(trace_id=root.trace_id).values_list("pk", "human_wait_ms"))
    for run in (root, child):
        assert 3_600_000 <= waits[run.pk] < 3_660_000, waits
    Run.objects.filter(pk=root.pk).update(
        status=RunStatus.COMPLETED,
        completed_at=ended,
        execution_time_ms=waits[root.pk] + 2000,
    )

    data = dashboard_metrics(user=alice, period=DAY, now=NOW)
    assert data.current.p95_ms == pytest.approx(1950)  # of 1000 and 2000 ms at work
    card = next(c for c in headline_cards(data) if c.key == "p95_latency")
    assert card.label == "P95 run time, excluding time waiting on a person"
    assert card.value == "1.95 s"
