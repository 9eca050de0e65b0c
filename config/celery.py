"""The Celery application.

    celery -A config worker            # advances runs (HIERARCH_EXECUTOR=celery)
    celery -A config beat              # sweeps for runs nobody moves, every SWEEP_SECONDS

The broker is CELERY_BROKER_URL (redis://… or amqp://…); every CELERY_* setting is in
config/settings.py. Nothing here imports litellm: the gateway imports it on the first model call.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("hierarch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _start_approval_timer(**_: object) -> None:
    """Approval timeouts fire from the worker's main process, beside the pool, so they are
    on time while every pool process is busy."""
    # This module loads before Django's apps (config/__init__.py): app modules at call time.
    from approvals.timers import start_approval_timer

    start_approval_timer()


@worker_init.connect
def _keep_database_connections(**_: object) -> None:
    """A worker keeps its database connection from step to step, for up to
    HIERARCH_ENGINE["WORKER_CONN_MAX_AGE"] seconds (Celery's own closing is off:
    CELERY_DB_REUSE_MAX). Pool processes forked later inherit this."""
    from runs.executors import keep_connections_in_this_process  # see above: at call time

    keep_connections_in_this_process()


@task_prerun.connect
@task_postrun.connect
def _release_database_connections(sender: object = None, **_: object) -> None:
    """Around each task, a connection too old, broken or left in a transaction goes (not
    around a task run eagerly, inside its caller's work, as Celery's own closing skips it)."""
    from runs.executors import release_connections  # see above: at call time

    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    release_connections()
