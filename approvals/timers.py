"""The timer that fires approval timeouts (PROCEED, ABORT, ESCALATE) on time.

It is a daemon thread, not a task: in a Celery worker it lives in the worker's main process
(started on `worker_ready`), beside the pool, so it fires while every pool process is busy
with long steps; with the inline executor it lives in the server process. Several timers
(several workers) are safe: each request is fired under a row lock, skipping locked rows.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connections

from approvals.services import approval_fire_due

log = logging.getLogger(__name__)

_thread: threading.Thread | None = None
_lock = threading.Lock()
_stop = threading.Event()


def start_approval_timer(interval: float | None = None) -> None:
    global _thread
    every = interval if interval is not None else settings.HIERARCH_HITL["TIMER_SECONDS"]
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _stop.clear()
        _thread = threading.Thread(
            target=_fire_forever, args=(every,), name="hierarch-approval-timer", daemon=True
        )
        _thread.start()


def stop_approval_timer() -> None:
    """Stop the timer (tests; a server or worker keeps it until it exits)."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
    _stop.set()
    if thread is not None:
        thread.join(timeout=10)


def _fire_forever(interval: float) -> None:
    while not _stop.is_set():
        try:
            approval_fire_due()
        except Exception:
            log.exception("firing approval timeouts failed")
        finally:
            connections.close_all()
        _stop.wait(interval)
