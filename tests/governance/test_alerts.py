"""Quotas refused at the boundary, and alerts: raised once each, mailed to the workspace's
admins, found by the periodic evaluation from what the runs say."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.utils import timezone

from governance.models import Alert
from runs.alerts import evaluate_alerts
from runs.models import Run
from runs.services import RunRefused, run_start
from tests.factories import EntityFactory, UserFactory, grant

pytestmark = pytest.mark.smoke


@pytest.fixture
def admin_user(acme):
    return grant(UserFactory(username="ada", email="ada@example.com"), acme, "admin")


@pytest.fixture
def entity(acme):
    return EntityFactory(workspace=acme, name="worker")


def finished(entity, *, cost="0", status="COMPLETED", ms=1000, ago=timedelta(minutes=5), **kw):
    """A root run of `entity` that ended `ago` with this cost and run time."""
    run = run_start(entity=entity, input_data={})
    ended = timezone.now() - ago
    Run.objects.filter(pk=run.pk).update(
        status=status,
        total_cost_usd=Decimal(cost),
        execution_time_ms=ms,
        started_at=ended - timedelta(milliseconds=ms),
        completed_at=ended,
        **kw,
    )
    return run


def test_a_person_starts_exactly_their_monthly_run_quota(
    acme, entity, admin_user, settings, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    acme.user_monthly_run_quota = 10
    acme.save()
    olga = grant(UserFactory(username="olga"), acme, "operator")
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(10):
            run_start(entity=entity, input_data={}, user=olga)
    with pytest.raises(RunRefused) as refused:
        run_start(entity=entity, input_data={}, user=olga)
    assert refused.value.code == "LIMIT_EXCEEDED"
    assert "olga has started 10 runs in Acme this month, its quota of 10" in str(refused.value)
    assert Run.objects.filter(created_by=olga).count() == 10  # nothing written

    # The ninth run raised the 90 % alert, once, mailed to the admin.
    [alert] = Alert.objects.filter(kind="quota")
    assert alert.message.startswith("olga has started 9 of 10 runs")
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert Alert.objects.get(pk=alert.pk).notified


def test_the_monthly_cost_quota_refuses_runs_once_spent(acme, entity):
    acme.monthly_cost_quota_usd = Decimal("1.00")
    acme.save()
    finished(entity, cost="0.95")
    run_start(entity=entity, input_data={})  # 95 % spent: it starts, with an alert
    assert Alert.objects.filter(kind="quota", key__startswith="quota_cost:").count() == 1

    finished(entity, cost="0.05")
    with pytest.raises(RunRefused) as refused:
        run_start(entity=entity, input_data={})
    assert "has spent $1 of its $1.00 monthly cost quota" in str(refused.value)


def test_a_run_whose_budget_would_pass_the_cost_quota_does_not_start(acme):
    acme.monthly_cost_quota_usd = Decimal("1.00")
    acme.save()
    budgeted = EntityFactory(workspace=acme, name="budgeted", max_cost=0.5)
    plain = EntityFactory(workspace=acme, name="plain")
    finished(plain, cost="0.50")
    run_start(entity=budgeted, input_data={})  # $0.50 + $0.50 = the quota exactly: fine
    with pytest.raises(RunRefused) as refused:
        finished(plain, cost="0.01")
        run_start(entity=budgeted, input_data={})
    assert "budget of $0.5 would take Acme past its $1.00 monthly cost quota" in str(refused.value)


def test_budgets_hired_subordinates_hold_count_against_a_new_runs_start(acme):
    acme.monthly_cost_quota_usd = Decimal("1.00")
    acme.quota_held_usd = Decimal("0.60")  # subordinates at work with budgets of their own
    acme.save()
    budgeted = EntityFactory(workspace=acme, name="budgeted", max_cost=0.5)
    with pytest.raises(RunRefused) as refused:
        run_start(entity=budgeted, input_data={})
    assert "($0 spent, $0.6 held by hired subordinates)" in str(refused.value)
    acme.quota_held_usd = Decimal("0.50")
    acme.save()
    run_start(entity=budgeted, input_data={})  # $0.50 held + $0.50: the quota exactly


def test_a_cost_spike_is_raised_once_against_the_entitys_average(entity):
    for _ in range(5):
        finished(entity, cost="0.010", ago=timedelta(minutes=30))
    usual = finished(entity, cost="0.020")  # twice the average: not more than twice
    spike = finished(entity, cost="0.030")
    assert evaluate_alerts() >= 1
    alerts = Alert.objects.filter(kind="cost_spike")
    assert [a.run_id for a in alerts] == [spike.pk]
    assert usual.pk not in {a.run_id for a in alerts}
    assert evaluate_alerts() == 0  # raised once


def test_a_failure_spike_is_raised_under_eighty_percent(acme, entity):
    for _ in range(4):
        finished(entity)
    finished(entity, status="FAILED")  # 4 of 5: 80 %, no alert
    evaluate_alerts()
    assert not Alert.objects.filter(kind="failure_spike").exists()

    finished(entity, status="FAILED")  # 4 of 6
    evaluate_alerts()
    [alert] = Alert.objects.filter(kind="failure_spike")
    assert alert.message.startswith("only 67% of the 6 runs")


def test_a_latency_spike_compares_the_last_hours_p95_with_the_weeks(entity):
    for _ in range(6):
        finished(entity, ms=1000, ago=timedelta(days=2))
    for _ in range(5):
        finished(entity, ms=2000)
    evaluate_alerts()
    assert not Alert.objects.filter(kind="latency_spike").exists()  # twice: not more

    finished(entity, ms=2500)
    for run in Run.objects.filter(execution_time_ms=2000):
        Run.objects.filter(pk=run.pk).update(execution_time_ms=2100)
    evaluate_alerts()
    assert Alert.objects.filter(kind="latency_spike").count() == 1


def test_a_run_half_its_timeout_past_its_deadline_is_stuck(entity):
    run = run_start(entity=entity, input_data={})
    started = timezone.now() - timedelta(seconds=140)
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", started_at=started, deadline_at=started + timedelta(seconds=100)
    )
    evaluate_alerts()  # 40 s past a 100 s timeout's deadline: not yet
    assert not Alert.objects.filter(kind="stuck_run").exists()

    Run.objects.filter(pk=run.pk).update(started_at=started - timedelta(seconds=11))
    Run.objects.filter(pk=run.pk).update(
        deadline_at=started - timedelta(seconds=11) + timedelta(seconds=100)
    )
    evaluate_alerts()
    [alert] = Alert.objects.filter(kind="stuck_run")
    assert alert.run_id == run.pk and alert.severity == "critical"


def test_budget_exhaustion_and_the_cost_threshold_are_raised_from_the_runs(entity):
    blocked = run_start(entity=entity, input_data={})
    Run.objects.filter(pk=blocked.pk).update(
        status="BLOCKED", error_code="BUDGET_EXHAUSTED", error_message="budget_exhausted: x"
    )
    costly = finished(entity, cost="3.50", cost_alert_usd=Decimal("3.00"))
    evaluate_alerts()
    assert Alert.objects.get(kind="budget_exhausted").run_id == blocked.pk
    assert Alert.objects.get(kind="cost_threshold").run_id == costly.pk


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slack_hook():
    _Hook.received, _Hook.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/planted-token-123"
    server.shutdown()


def test_an_alert_is_posted_to_the_workspaces_slack_webhook_from_the_vault(
    acme, entity, slack_hook, settings, caplog, django_capture_on_commit_callbacks
):
    from governance.vault import secret_set

    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True  # the fake webhook listens on loopback
    secret_set(workspace=acme, name="slack-ops", value=slack_hook, kind="WEBHOOK_URL")
    acme.slack_webhook_secret = "slack-ops"
    acme.save()
    Run.objects.filter(pk=run_start(entity=entity, input_data={}).pk).update(
        status="BLOCKED", error_code="BUDGET_EXHAUSTED", error_message="budget_exhausted: x"
    )
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts()

    [posted] = _Hook.received
    assert posted["text"].startswith("*[Hierarch] Acme: Budget exhausted*")
    assert Alert.objects.get().notified
    assert "planted-token-123" not in caplog.text


def test_a_webhook_that_fails_leaves_the_alert_unnotified_and_logs_no_url(
    acme, entity, slack_hook, settings, caplog, django_capture_on_commit_callbacks
):
    from governance.vault import secret_set

    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True
    _Hook.status = 500
    secret_set(workspace=acme, name="slack-ops", value=slack_hook, kind="WEBHOOK_URL")
    acme.slack_webhook_secret = "slack-ops"
    acme.save()
    finished(entity, cost="3.50", cost_alert_usd=Decimal("3.00"))
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts()
    assert not Alert.objects.get().notified
    assert "Slack answered 500" in caplog.text
    assert "planted-token-123" not in caplog.text


def test_a_private_webhook_address_is_refused_unless_allowed(
    acme, entity, slack_hook, django_capture_on_commit_callbacks
):
    from governance.vault import secret_set

    secret_set(workspace=acme, name="slack-ops", value=slack_hook, kind="WEBHOOK_URL")
    acme.slack_webhook_secret = "slack-ops"
    acme.save()
    finished(entity, cost="3.50", cost_alert_usd=Decimal("3.00"))
    with django_capture_on_commit_callbacks(execute=True):
        evaluate_alerts()
    assert _Hook.received == []
    assert not Alert.objects.get().notified


def test_a_run_waiting_on_a_person_is_not_stuck(entity):
    from tests.factories import approval_request

    run = run_start(entity=entity, input_data={})
    started = timezone.now() - timedelta(seconds=500)
    Run.objects.filter(pk=run.pk).update(
        status="PAUSED", started_at=started, deadline_at=started + timedelta(seconds=100)
    )
    run.refresh_from_db()
    request = approval_request(run)
    evaluate_alerts()
    assert not Alert.objects.filter(kind="stuck_run").exists()

    request.status = "APPROVED"  # decided, and still going long past its deadline: stuck
    request.save()
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    evaluate_alerts()
    assert Alert.objects.filter(kind="stuck_run", run_id=run.pk).exists()
