"""Celery tasks: load by id, call the service, done."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def advance_run(run_id: str) -> None:
    from runs.services import run_advance

    run_advance(run_id)


@shared_task(ignore_result=True)
def sweep_runs() -> int:
    from runs.sweeper import sweep

    return sweep()
