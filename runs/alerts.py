"""The alerts found by looking at the runs (seed 000 §11.2), every minute or so (Celery beat:
`runs.tasks.evaluate_alerts_task`, or the inline executor's sweeper thread), so the engine
never waits on them; `governance.alerts` raises, stores and sends them:

- cost threshold: a run whose cost reached its entity's alert_threshold_usd;
- budget exhausted: a run waiting BLOCKED on its budget;
- cost spike: a run that cost more than twice its entity's average over earlier runs;
- failure spike: under 80 % of a workspace's runs that ended in the last hour succeeded;
- latency spike: the last hour's 95th percentile run time more than twice the week's;
- stuck execution: a run still going half its timeout past its deadline.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, F, Q
from django.utils import timezone

from entities.models import Workspace
from governance.alerts import alert_raise
from governance.models import AlertKind, AlertSeverity
from runs.approval_desk import approval_desk
from runs.models import ACTIVE, TERMINAL, Run, RunStatus

SPIKE_FACTOR = 2  # a cost or latency more than this many times the usual is a spike
MIN_SAMPLES = 5  # fewer runs than this say nothing about what is usual
FAILURE_RATE_FLOOR = Decimal("0.80")
STUCK_GRACE = 0.5  # of the run's timeout, past its deadline


def evaluate_alerts(now: Any = None) -> int:
    """Look at the runs and raise what needs raising; answers how many alerts are new."""
    now = now or timezone.now()
    runs = Run.objects.select_related("entity")
    hour = now - timedelta(hours=1)
    recent = Run.objects.filter(completed_at__gte=hour, status__in=TERMINAL)
    raised = (
        _cost_threshold_alerts(runs)
        + _budget_exhausted_alerts(runs)
        + _stuck_run_alerts(runs, now)
        + _cost_spike_alerts(recent)
    )
    bucket = now.strftime("%Y-%m-%dT%H")
    for workspace in Workspace.objects.filter(runs__completed_at__gte=hour).distinct():
        ended = recent.filter(workspace=workspace, parent__isnull=True)
        raised += _failure_spike_alert(workspace.pk, ended, bucket)
        raised += _latency_spike_alert(workspace.pk, ended, bucket, now=now, hour=hour)
    return raised


def _cost_threshold_alerts(runs: Any) -> int:
    raised = 0
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
    return raised


def _budget_exhausted_alerts(runs: Any) -> int:
    raised = 0
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
    return raised


def _stuck_run_alerts(runs: Any, now: Any) -> int:
    # A trace that waits on a person is not stuck: that time does not count (the decision
    # moves its deadlines).
    raised = 0
    going = runs.filter(status__in=ACTIVE, deadline_at__isnull=False, started_at__isnull=False)
    for run in going.exclude(trace_id__in=approval_desk().open_traces()):
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
    return raised


def _cost_spike_alerts(recent: Any) -> int:
    raised = 0
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
    return raised


def _failure_spike_alert(workspace_id: int, ended: Any, bucket: str) -> int:
    counts = ended.aggregate(
        total=Count("pk"), ok=Count("pk", filter=Q(status=RunStatus.COMPLETED))
    )
    if counts["total"] < MIN_SAMPLES:
        return 0
    rate = Decimal(counts["ok"]) / counts["total"]
    if rate >= FAILURE_RATE_FLOOR:
        return 0
    return _raised(
        workspace_id,
        AlertKind.FAILURE_SPIKE,
        f"failure_spike:{bucket}",
        f"only {rate:.0%} of the {counts['total']} runs that ended in the last hour "
        "succeeded (under 80 %)",
        severity=AlertSeverity.CRITICAL,
    )


def _latency_spike_alert(workspace_id: int, ended: Any, bucket: str, *, now: Any, hour: Any) -> int:
    latest = _p95(ended.filter(execution_time_ms__isnull=False))
    usual = _p95(
        Run.objects.filter(
            workspace_id=workspace_id,
            parent__isnull=True,
            completed_at__gte=now - timedelta(days=7),
            completed_at__lt=hour,
            execution_time_ms__isnull=False,
        )
    )
    if latest is None or not usual or latest <= SPIKE_FACTOR * usual:
        return 0
    return _raised(
        workspace_id,
        AlertKind.LATENCY_SPIKE,
        f"latency_spike:{bucket}",
        f"the last hour's 95th percentile run time, {latest} ms, is more than "
        f"{SPIKE_FACTOR}x the week's ({usual} ms)",
    )


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
