"""The sweeper: finds runs that should be moving and nobody is moving, and enqueues them.

A worker that died leaves its lease to expire; a message can be lost; a retry waits for its
due time. The database says which runs need a look; this hands them to the executor. It runs
from Celery beat (`runs.tasks.sweep_runs`) or, with the inline executor, from a timer thread
in the server process.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from governance.audit import audit_heads_export
from runs import sql
from runs.alerts import evaluate_alerts
from runs.executors import enqueue
from runs.models import ACTIVE, TERMINAL, Run, RunStatus
from runs.webhooks import webhook_sweep

log = logging.getLogger(__name__)

# A PENDING run nobody claimed within this long lost its hint.
PENDING_GRACE = timedelta(seconds=10)


def sweep(limit: int = 500) -> int:
    """Enqueue every run that needs a look; answers how many."""
    now = timezone.now()
    unleased = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)
    due = Q(wake_at__isnull=True) | Q(wake_at__lte=now)
    # A BLOCKED child is unfinished too: its parent has nothing to do until it moves.
    active_children = Run.objects.filter(parent=OuterRef("pk")).exclude(status__in=TERMINAL)
    stuck = (
        Run.objects.filter(unleased, due)
        .filter(
            Q(status=RunStatus.RUNNING)
            | Q(status=RunStatus.PENDING, created_at__lte=now - PENDING_GRACE)
            | Q(status=RunStatus.WAITING) & ~Q(Exists(active_children))
            | Q(status__in=[*ACTIVE, RunStatus.BLOCKED], cancel_requested=True)
            # Past its deadline (timeout_ms): the engine ends it TIMEOUT.
            | Q(status__in=[RunStatus.RUNNING, RunStatus.WAITING], deadline_at__lte=now)
        )
        .order_by("created_at")  # the longest forgotten first
        .values_list("pk", flat=True)[:limit]
    )
    ids = [str(pk) for pk in stuck]
    for run_id in ids:
        enqueue(run_id)
    if ids:
        log.info("sweeper enqueued %d runs", len(ids))
    try:
        # Planner statistics that follow the runs tables as they grow (runs/sql.py `analyze`).
        sql.analyze(grown_only=True)
    except DatabaseError:
        log.warning("analysing the runs tables failed", exc_info=True)
    return len(ids)


_timer: threading.Thread | None = None
_timer_lock = threading.Lock()


def start_inline_sweeper(interval: float | None = None) -> None:
    """With the inline executor: sweep now (runs a previous server process left behind), then
    every `interval` seconds (HIERARCH_ENGINE["SWEEP_SECONDS"]), in a daemon thread."""
    global _timer
    every = interval if interval is not None else settings.HIERARCH_ENGINE["SWEEP_SECONDS"]
    with _timer_lock:
        if _timer is not None:
            return
        _timer = threading.Thread(
            target=_sweep_forever, args=(every,), name="hierarch-sweeper", daemon=True
        )
        _timer.start()


def _sweep_forever(interval: float) -> None:
    never = threading.Event()
    alerts_due = heads_due = 0.0
    while True:
        try:
            sweep()
            webhook_sweep()  # attempts whose hint was lost (a restart between commit and send)
            if time.monotonic() >= alerts_due:  # the inline executor has no beat
                alerts_due = time.monotonic() + settings.HIERARCH_ALERTS_SECONDS
                evaluate_alerts()
            export_every = settings.HIERARCH_AUDIT["EXPORT_SECONDS"]
            if export_every > 0 and time.monotonic() >= heads_due:
                heads_due = time.monotonic() + export_every
                audit_heads_export()  # chain heads to keep outside the database
        except Exception:
            log.exception("sweeping runs failed")
        finally:
            connections.close_all()
        never.wait(interval)
