"""Alerts (seed 000 §11.2): raised once each, stored, listed in the admin, mailed to the
workspace's admins.

Most are found by `evaluate_alerts`, which looks at the runs every minute or so (Celery beat,
or the inline executor's sweeper thread), so the engine never waits on them:

- cost threshold: a run whose cost reached its entity's alert_threshold_usd;
- budget exhausted: a run waiting BLOCKED on its budget;
- cost spike: a run that cost more than twice its entity's average over earlier runs;
- failure spike: under 80 % of a workspace's runs that ended in the last hour succeeded;
- latency spike: the last hour's 95th percentile run time more than twice the week's;
- stuck execution: a run still going half its timeout past its deadline.

A quota at 90 % is raised when a run starts (`runs.services.run_start`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count, Exists, F, OuterRef, Q
from django.utils import timezone

from entities.models import Workspace
from governance.models import Alert, AlertKind, AlertSeverity
from runs.engine.ports import ToolError

log = logging.getLogger(__name__)

SPIKE_FACTOR = 2  # a cost or latency more than this many times the usual is a spike
MIN_SAMPLES = 5  # fewer runs than this say nothing about what is usual
FAILURE_RATE_FLOOR = Decimal("0.80")
STUCK_GRACE = 0.5  # of the run's timeout, past its deadline
SLACK_TIMEOUT_S = 5


def alert_raise(
    *,
    workspace_id: int,
    kind: str,
    key: str,
    message: str,
    severity: str = AlertSeverity.WARNING,
    entity_id: Any = None,
    run_id: Any = None,
    details: dict | None = None,
) -> Alert | None:
    """Store the alert and notify, unless one with this key exists: answers the new alert,
    or None when it was raised before."""
    if Alert.objects.filter(workspace_id=workspace_id, key=key).exists():
        return None
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                workspace_id=workspace_id,
                kind=kind,
                key=key[:200],
                message=message,
                severity=severity,
                entity_id=entity_id,
                run_id=run_id,
                details=details or {},
            )
    except IntegrityError:  # raised at the same moment elsewhere
        return None
    log.warning("alert in workspace %s: %s", workspace_id, message)
    transaction.on_commit(lambda: notify(alert.pk))
    return alert


def notify(alert_id: int) -> None:
    """Mail the alert to the workspace's admins (Django's email backend: the console in the
    embedded default); a failure is logged, never raised into the caller."""
    from governance.permissions import ADMINISTER, users_with

    alert = Alert.objects.select_related("workspace").get(pk=alert_id)
    recipients = [u.email for u in users_with(alert.workspace, ADMINISTER) if u.email]
    subject = f"[Hierarch] {alert.workspace.name}: {alert.get_kind_display()}"
    sent = True
    if recipients:
        try:
            send_mail(subject, alert.message, settings.DEFAULT_FROM_EMAIL, recipients)
        except Exception:
            log.exception("mailing alert %s failed", alert_id)
            sent = False
    if alert.workspace.slack_webhook_secret:
        sent = slack_post(alert.workspace, f"*{subject}*\n{alert.message}") and sent
    if sent:
        Alert.objects.filter(pk=alert_id).update(notified=True)


def slack_post(workspace: Workspace, text: str) -> bool:
    """Post `text` to the workspace's Slack incoming webhook (its URL kept in the vault);
    False, logged without the URL, when it cannot be delivered."""
    import httpx

    from governance.vault import VaultError, secret_resolve
    from tools.builtin.http_request import resolve

    name = workspace.slack_webhook_secret
    try:
        url = httpx.URL(secret_resolve(workspace.pk, name))
        host = url.raw_host.decode("ascii").lower()
        if url.scheme not in ("http", "https") or not host:
            log.warning("secret %s is not an http(s) webhook URL; Slack not posted", name)
            return False
        resolve(url, host)  # a private address only where HIERARCH_HTTP_ALLOW_PRIVATE says
        response = httpx.post(str(url), json={"text": text}, timeout=SLACK_TIMEOUT_S)
    except (VaultError, ToolError, httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        log.warning(
            "posting to Slack (secret %s) failed: %s", name, type(exc).__name__, exc_info=False
        )
        return False
    if response.status_code >= 400:
        log.warning("Slack answered %s to the webhook of secret %s", response.status_code, name)
        return False
    return True


def evaluate_alerts(now: Any = None) -> int:
    """Look at the runs and raise what needs raising; answers how many alerts are new."""
    from runs.models import ACTIVE, TERMINAL, Run, RunStatus

    now = now or timezone.now()
    raised = 0
    runs = Run.objects.select_related("entity")

    for run in runs.filter(cost_alert_usd__isnull=False, total_cost_usd__gte=F("cost_alert_usd")):
        raised += _raised(
            run.workspace_id,
            AlertKind.COST_THRESHOLD,
            f"cost_threshold:{run.pk}",
            f"{run.entity.name} run {run.pk} has cost ${run.total_cost_usd.normalize()}, at "
            f"or past its alert threshold of ${run.cost_alert_usd.normalize()}",
            entity_id=run.entity_id,
            run_id=run.pk,
        )
    for run in runs.filter(status=RunStatus.BLOCKED, error_code="BUDGET_EXHAUSTED"):
        raised += _raised(
            run.workspace_id,
            AlertKind.BUDGET_EXHAUSTED,
            f"budget_exhausted:{run.pk}",
            f"{run.entity.name} run {run.pk} waits: {run.error_message}",
            severity=AlertSeverity.CRITICAL,
            entity_id=run.entity_id,
            run_id=run.pk,
        )
    from approvals.models import OPEN, Approval

    # A trace that waits on a person is not stuck: that time does not count (the decision
    # moves its deadlines).
    waiting_on_people = Approval.objects.filter(trace_id=OuterRef("trace_id"), status__in=OPEN)
    going = runs.filter(status__in=ACTIVE, deadline_at__isnull=False, started_at__isnull=False)
    for run in going.exclude(Exists(waiting_on_people)):
        timeout = run.deadline_at - run.started_at
        if now > run.deadline_at + timeout * STUCK_GRACE:
            raised += _raised(
                run.workspace_id,
                AlertKind.STUCK_RUN,
                f"stuck_run:{run.pk}",
                f"{run.entity.name} run {run.pk} is still {run.status.lower()} "
                f"{(now - run.deadline_at).total_seconds():.0f} s past its deadline",
                severity=AlertSeverity.CRITICAL,
                entity_id=run.entity_id,
                run_id=run.pk,
            )

    hour = now - timedelta(hours=1)
    recent = Run.objects.filter(completed_at__gte=hour, status__in=TERMINAL)
    for run in recent.filter(status=RunStatus.COMPLETED).select_related("entity"):
        usual = (
            Run.objects.filter(entity_id=run.entity_id, status=RunStatus.COMPLETED)
            .exclude(pk=run.pk)
            .filter(completed_at__lt=run.completed_at)
            .aggregate(mean=Avg("total_cost_usd"), n=Count("pk"))
        )
        if (
            usual["n"] >= MIN_SAMPLES
            and usual["mean"]
            and (run.total_cost_usd > SPIKE_FACTOR * usual["mean"])
        ):
            raised += _raised(
                run.workspace_id,
                AlertKind.COST_SPIKE,
                f"cost_spike:{run.pk}",
                f"{run.entity.name} run {run.pk} cost ${run.total_cost_usd.normalize()}, more "
                f"than {SPIKE_FACTOR}x its average of ${Decimal(usual['mean']):.6f}",
                entity_id=run.entity_id,
                run_id=run.pk,
            )

    bucket = now.strftime("%Y-%m-%dT%H")
    for workspace in Workspace.objects.filter(runs__completed_at__gte=hour).distinct():
        ended = recent.filter(workspace=workspace, parent__isnull=True)
        counts = ended.aggregate(
            total=Count("pk"), ok=Count("pk", filter=Q(status=RunStatus.COMPLETED))
        )
        if counts["total"] >= MIN_SAMPLES:
            rate = Decimal(counts["ok"]) / counts["total"]
            if rate < FAILURE_RATE_FLOOR:
                raised += _raised(
                    workspace.pk,
                    AlertKind.FAILURE_SPIKE,
                    f"failure_spike:{bucket}",
                    f"only {rate:.0%} of the {counts['total']} runs that ended in the last hour "
                    "succeeded (under 80 %)",
                    severity=AlertSeverity.CRITICAL,
                )
        latest = _p95(ended.filter(execution_time_ms__isnull=False))
        usual = _p95(
            Run.objects.filter(
                workspace=workspace,
                parent__isnull=True,
                completed_at__gte=now - timedelta(days=7),
                completed_at__lt=hour,
                execution_time_ms__isnull=False,
            )
        )
        if latest is not None and usual and latest > SPIKE_FACTOR * usual:
            raised += _raised(
                workspace.pk,
                AlertKind.LATENCY_SPIKE,
                f"latency_spike:{bucket}",
                f"the last hour's 95th percentile run time, {latest} ms, is more than "
                f"{SPIKE_FACTOR}x the week's ({usual} ms)",
            )
    return raised


def _p95(runs: Any) -> int | None:
    times = sorted(runs.values_list("execution_time_ms", flat=True)[:10_000])
    if len(times) < MIN_SAMPLES:
        return None
    return times[min(len(times) - 1, int(len(times) * 0.95))]


def _raised(workspace_id: int, kind: str, key: str, message: str, **extra: Any) -> int:
    return (
        1
        if alert_raise(workspace_id=workspace_id, kind=kind, key=key, message=message, **extra)
        else 0
    )
