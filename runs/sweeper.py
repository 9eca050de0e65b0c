"""The sweeper: finds runs that should be moving and nobody is moving, and enqueues them.

A worker that died leaves its lease to expire; a message can be lost; a retry waits for its
due time. The database says which runs need a look; this hands them to the executor. It runs
from Celery beat (`runs.tasks.sweep_runs`) or, with the inline executor, from a timer thread
in the server process.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from runs.executors import enqueue
from runs.models import ACTIVE, Run, RunStatus

log = logging.getLogger(__name__)

# A PENDING run nobody claimed within this long lost its hint.
PENDING_GRACE = timedelta(seconds=10)


def sweep(limit: int = 500) -> int:
    """Enqueue every run that needs a look; answers how many."""
    now = timezone.now()
    unleased = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)
    due = Q(wake_at__isnull=True) | Q(wake_at__lte=now)
    active_children = Run.objects.filter(parent=OuterRef("pk"), status__in=ACTIVE)
    stuck = (
        Run.objects.filter(unleased, due)
        .filter(
            Q(status=RunStatus.RUNNING)
            | Q(status=RunStatus.PENDING, created_at__lte=now - PENDING_GRACE)
            | Q(status=RunStatus.WAITING) & ~Q(Exists(active_children))
            | Q(status__in=ACTIVE, cancel_requested=True)
        )
        .values_list("pk", flat=True)[:limit]
    )
    ids = [str(pk) for pk in stuck]
    for run_id in ids:
        enqueue(run_id)
    if ids:
        log.info("sweeper enqueued %d runs", len(ids))
    return len(ids)


_timer: threading.Thread | None = None


def start_inline_sweeper(interval: float = 5.0) -> None:
    """With the inline executor: sweep every `interval` seconds in a daemon thread."""
    global _timer
    if _timer is not None:
        return

    def loop() -> None:
        from django.db import close_old_connections

        stop = threading.Event()
        while not stop.wait(interval):
            close_old_connections()
            try:
                sweep()
            except Exception:
                log.exception("sweeping runs failed")

    _timer = threading.Thread(target=loop, name="hierarch-sweeper", daemon=True)
    _timer.start()
