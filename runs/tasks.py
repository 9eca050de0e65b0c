"""Celery tasks: load by id, call the service, done. A message is only a hint to look at a run;
the run's row says whether there is anything to do, so a duplicate or late message is harmless."""

from __future__ import annotations

from celery import shared_task

from runs.alerts import evaluate_alerts
from runs.services import run_advance
from runs.sweeper import sweep
from runs.tracing import trace_export
from runs.webhooks import webhook_deliver, webhook_sweep


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def advance_run(run_id: str) -> None:
    run_advance(run_id)


@shared_task(ignore_result=True)
def sweep_runs() -> None:
    sweep()
    webhook_sweep()  # webhook attempts whose hint was lost


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver_webhook(delivery_pk: int) -> None:
    webhook_deliver(delivery_pk=delivery_pk)


@shared_task(ignore_result=True)
def evaluate_alerts_task() -> None:
    evaluate_alerts()


@shared_task(ignore_result=True)
def export_trace(trace_id: str) -> None:
    trace_export(trace_id=trace_id)
