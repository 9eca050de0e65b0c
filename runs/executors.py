"""The two executors behind HIERARCH_EXECUTOR; both call `run_advance(run_id)`.

`inline` runs the engine in a thread pool inside the server process (the embedded default);
`celery` sends a task that a worker picks up. Either way the hint is sent only after the
transaction that made the work commits, and it is only a hint: the run's row decides whether
there is anything to do, and the sweeper re-sends any hint that was lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.db.backends.signals import connection_created
from psycopg.pq import TransactionStatus

from runs import background

log = logging.getLogger(__name__)

# A delayed hint is sent only for a wait this short; a longer one is the sweeper's, which finds
# the run by its due time (a long countdown message is held by a worker, or redelivered in a
# loop by Redis past its visibility timeout).
DELAYED_HINT_MAX_SECONDS = 10.0
# A hint that arrives before the run's due time finds nothing to do; aim a little after it.
_DELAYED_HINT_SLACK_SECONDS = 0.05

_pool: ThreadPoolExecutor | None = None
_pool_threads = 0
_pool_lock = threading.Lock()

# Engine workers keep their database connection between steps (HIERARCH_ENGINE's
# WORKER_CONN_MAX_AGE): a Celery worker process (`keep_connections_in_this_process`, from the
# worker's start) and each inline executor thread. Anywhere else (a request, a command) the
# connection lives as DB_CONN_MAX_AGE says.
_process_keeps_connections = False
_thread = threading.local()


def keep_connections_in_this_process() -> None:
    """This process is an engine worker: its connections are kept between steps."""
    global _process_keeps_connections
    _process_keeps_connections = True


def _keep_connections_in_this_thread() -> None:
    _thread.keeps_connections = True


def _worker_connection_lifetime(connection: Any, **_: Any) -> None:
    """A worker's new connection is closed by `close_old_connections` only once it is older
    than WORKER_CONN_MAX_AGE (or broken, or left inside a transaction), not after each step."""
    if not (_process_keeps_connections or getattr(_thread, "keeps_connections", False)):
        return
    max_age = settings.HIERARCH_ENGINE.get("WORKER_CONN_MAX_AGE", 0)
    if max_age > 0:
        connection.close_at = time.monotonic() + max_age


connection_created.connect(_worker_connection_lifetime, dispatch_uid="hierarch-worker-connections")


def release_connections() -> None:
    """Before and after a worker's step: close what must not be kept (too old, broken, left
    inside a transaction, or that this thread does not keep) and keep the rest."""
    for connection in connections.all(initialized_only=True):
        raw = connection.connection
        if (
            raw is not None
            and connection.vendor == "postgresql"
            and raw.info.transaction_status != TransactionStatus.IDLE
        ):
            connection.close()  # the server holds a transaction Django does not know of
    close_old_connections()


def _inline_pool() -> ThreadPoolExecutor:
    global _pool, _pool_threads
    with _pool_lock:
        if _pool is None:
            _pool_threads = settings.HIERARCH_ENGINE["INLINE_WORKERS"]
            _pool = ThreadPoolExecutor(
                max_workers=_pool_threads,
                thread_name_prefix="hierarch-run",
                initializer=_keep_connections_in_this_thread,
            )
        return _pool


def shutdown_inline_pool() -> None:
    """Stop the inline executor's threads once their current steps end, each closing the
    connection it kept; a later hint starts a new pool."""
    global _pool
    with _pool_lock:
        pool, threads, _pool = _pool, _pool_threads, None
    if pool is None:
        return
    # One closing job per thread: each waits for the others, so no thread takes two.
    everyone = threading.Barrier(threads)

    def close_this_threads_connections() -> None:
        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            everyone.wait(timeout=10)

    for _ in range(threads):
        pool.submit(close_this_threads_connections)
    pool.shutdown(wait=True)


def _advance_inline(run_id: str) -> None:
    from runs.services import run_advance

    release_connections()
    try:
        run_advance(run_id)
    except Exception:
        log.exception("advancing run %s failed", run_id)
    finally:
        release_connections()  # kept for the thread's next step, unless too old or broken


def _submit_inline(run_id: str) -> None:
    background.submit(_inline_pool(), _advance_inline, run_id)


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

    transaction.on_commit(lambda: background.later(countdown, _submit_inline, run_id))
