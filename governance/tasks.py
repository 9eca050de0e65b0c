"""Celery tasks of governance: periodic alert evaluation and audit head export (beat)."""

from __future__ import annotations

from celery import shared_task

from governance.alerts import evaluate_alerts
from governance.audit import audit_heads_export


@shared_task(ignore_result=True)
def evaluate_alerts_task() -> None:
    evaluate_alerts()


@shared_task(ignore_result=True)
def export_audit_heads_task() -> None:
    audit_heads_export()
