"""Celery tasks of approvals: load by id, call the service, done."""

from __future__ import annotations

from celery import shared_task

from approvals.notifications import notify


@shared_task(ignore_result=True)
def notify_approval(approval_id: int) -> None:
    notify(approval_id)
