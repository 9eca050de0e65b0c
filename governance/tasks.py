"""Celery tasks of governance: periodic alert evaluation (beat)."""

from __future__ import annotations

from celery import shared_task

from governance.alerts import evaluate_alerts


@shared_task(ignore_result=True)
def evaluate_alerts_task() -> None:
    evaluate_alerts()
