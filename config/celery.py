"""The Celery application.

    celery -A config worker            # advances runs (HIERARCH_EXECUTOR=celery)
    celery -A config beat              # sweeps for runs nobody moves, every SWEEP_SECONDS

The broker is CELERY_BROKER_URL (redis://… or amqp://…); every CELERY_* setting is in
config/settings.py. Nothing here imports litellm: the gateway imports it on the first model call.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("hierarch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _start_approval_timer(**_: object) -> None:
    """Approval timeouts fire from the worker's main process, beside the pool, so they are
    on time while every pool process is busy."""
    from approvals.timers import start_approval_timer

    start_approval_timer()
