"""The Celery application.

    celery -A config worker            # advances runs (HIERARCH_EXECUTOR=celery)
    celery -A config beat              # sweeps for runs nobody moves, every SWEEP_SECONDS

A worker runs HIERARCH_WORKER_CONCURRENCY steps at once in a pool of threads (the settings'
CELERY_WORKER_POOL and CELERY_WORKER_CONCURRENCY), its database connections bounded by the
process's pool (DB_POOL_MAX_SIZE); the runs its steps start or wake go to its own free
threads before the broker (HIERARCH_WORKER_OWN_HINTS, runs/executors.py). `WORKER_COMMAND` is
the command the README deploys and the benchmark starts. The broker is CELERY_BROKER_URL
(redis://… or amqp://…); every CELERY_* setting is in config/settings.py. Nothing here imports
litellm: the gateway imports it on the first model call.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_ready,
    worker_shutting_down,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# The production worker, as the README deploys it (bench/engine.py starts exactly this).
WORKER_COMMAND = ("celery", "-A", "config", "worker")

app = Celery("hierarch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _start_approval_timer(**_: object) -> None:
    """Approval timeouts fire from a thread of the worker's process beside its pool, so they
    are on time while every slot of the pool is busy."""
    # This module loads before Django's apps (config/__init__.py): app modules at call time.
    from approvals.timers import start_approval_timer

    start_approval_timer()


@worker_init.connect
def _own_hints(sender: Any, **_: object) -> None:
    """A step's hints go to this worker's own free threads before the broker, up to its
    concurrency (`-c`, else the settings'): runs/executors.py."""
    from django.conf import settings

    from runs.executors import worker_hints_install

    if settings.HIERARCH_ENGINE["WORKER_OWN_HINTS"]:
        slots = sender.concurrency
        worker_hints_install(
            slots if isinstance(slots, int) else settings.CELERY_WORKER_CONCURRENCY
        )


@worker_shutting_down.connect
def _stop_own_hints(**_: object) -> None:
    """A worker that stops sends its steps' hints to the broker again, for the other workers."""
    from runs.executors import worker_hints_install

    worker_hints_install(0)


@task_prerun.connect
def _count_task_started(**_: object) -> None:
    from runs.executors import worker_task_started

    worker_task_started()


@task_postrun.connect
def _count_task_ended(**_: object) -> None:
    from runs.executors import worker_task_ended

    worker_task_ended()
