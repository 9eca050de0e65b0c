"""Celery tasks of governance: the audit head export (beat)."""

from __future__ import annotations

from celery import shared_task

from governance.audit import audit_heads_export


@shared_task(ignore_result=True)
def export_audit_heads_task() -> None:
    audit_heads_export()
