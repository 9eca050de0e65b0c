"""The two executors behind HIERARCH_EXECUTOR; both call `run_advance(run_id)`.

`inline` runs the engine in a thread pool inside the server process (the embedded default);
`celery` sends a task that a worker picks up. Either way the hint is sent only after the
transaction that made the work commits, and it is only a hint: the run's row decides whether
there is anything to do, and the sweeper re-sends any hint that was lost.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connections, transaction

log = logging.getLogger(__name__)

# A delayed hint is sent only for a wait this short; a longer one is the sweeper's, which finds
# the run by its due time (a long countdown message is held by a worker, or redelivered in a
# loop by Redis past its visibility timeout).
DELAYED_HINT_MAX_SECONDS = 10.0
# A hint that arrives before the run's due time finds nothing to do; aim a little after it.
_DELAYED_HINT_SLACK_SECONDS = 0.05

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _inline_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.HIERARCH_ENGINE["INLINE_WORKERS"],
                thread_name_prefix="hierarch-run",
            )
        return _pool


def _advance_inline(run_id: str) -> None:
    from runs.services import run_advance

    close_old_connections()
    try:
        run_advance(run_id)
    except Exception:
        log.exception("advancing run %s failed", run_id)
    finally:
        connections.close_all()


def _submit_inline(run_id: str) -> None:
    _inline_pool().submit(_advance_inline, run_id)


def enqueue(run_id: str) -> None:
    """Ask an executor to advance the run once the current transaction commits."""
    if settings.HIERARCH_EXECUTOR == "celery":
        from runs.tasks import advance_run

        advance_run.delay_on_commit(run_id)
        return
    transaction.on_commit(lambda: _submit_inline(run_id))


def enqueue_at(run_id: str, delay_s: float) -> None:
    """Ask an executor to advance the run in `delay_s` seconds, once the current transaction
    commits.

    The run's `wake_at` (written by the engine) is the truth and the sweeper advances any run
    whose time has come; this only saves the wait for the next sweep when the delay is short."""
    if delay_s <= 0:
        enqueue(run_id)
        return
    if delay_s > DELAYED_HINT_MAX_SECONDS:
        return
    countdown = delay_s + _DELAYED_HINT_SLACK_SECONDS
    if settings.HIERARCH_EXECUTOR == "celery":
        from runs.tasks import advance_run

        advance_run.apply_async_on_commit((run_id,), countdown=countdown)
        return

    def start_timer() -> None:
        timer = threading.Timer(countdown, _submit_inline, args=(run_id,))
        timer.daemon = True  # a pending hint must not keep the server from exiting
        timer.start()

    transaction.on_commit(start_timer)
