"""The two executors behind HIERARCH_EXECUTOR; both call `run_advance(run_id)`.

The executors sit below the run services (which hand them work) and the Celery tasks (which
carry it): what they call is handed to them once the runs app is ready (`executor_install`,
from runs/apps.py), so nothing here imports upwards.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections, transaction
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


class _Hintable(Protocol):
    """A Celery task that takes a run's id (runs.tasks.advance_run)."""

    def delay(self, *args: Any) -> Any: ...

    def delay_on_commit(self, *args: Any) -> None: ...

    def apply_async_on_commit(self, args: tuple, **options: Any) -> None: ...


_advance: Callable[[str], None] | None = None  # runs.services.run_advance
_advance_task: _Hintable | None = None  # runs.tasks.advance_run


def executor_install(*, advance: Callable[[str], None], advance_task: _Hintable) -> None:
    """What the executors call: `advance(run_id)` in an inline thread, `advance_task` sent to
    a Celery worker (which calls the same service)."""
    global _advance, _advance_task
    _advance, _advance_task = advance, advance_task


def _installed() -> tuple[Callable[[str], None], _Hintable]:
    if _advance is None or _advance_task is None:
        raise RuntimeError("the executors were not installed: is the runs app loaded?")
    return _advance, _advance_task


_pool: ThreadPoolExecutor | None = None
_pool_threads = 0
_pool_lock = threading.Lock()

# Database connections of engine work (a Celery worker thread, an inline executor thread):
#
# - PostgreSQL: every process takes them from its pool (settings: DB_POOL_MAX_SIZE), so
#   however many threads run steps, no more are open. A thread hands its connection back after
#   each step and before each wait outside the database (a model call, a tool that waits on
#   the network: `release_before_waiting`), and takes one again at its next query; the pool
#   keeps them open, prepared statements and all. Nothing the engine relies on outlives a
#   transaction, so a pooler in transaction mode (PgBouncer) may stand between.
# - SQLite (no pool): an inline executor thread keeps its connection between steps for up to
#   HIERARCH_ENGINE's WORKER_CONN_MAX_AGE; anywhere else a connection lives as
#   DB_CONN_MAX_AGE says.
_thread = threading.local()


def _pooled(connection: Any) -> bool:
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


def _keep_connections_in_this_thread() -> None:
    _thread.keeps_connections = True


def _worker_connection_lifetime(connection: Any, **_: Any) -> None:
    """An inline thread's new unpooled connection is closed by `close_old_connections` only
    once it is older than WORKER_CONN_MAX_AGE (or broken), not after each step."""
    if _pooled(connection) or not getattr(_thread, "keeps_connections", False):
        return
    max_age = settings.HIERARCH_ENGINE.get("WORKER_CONN_MAX_AGE", 0)
    if max_age > 0:
        connection.close_at = time.monotonic() + max_age


connection_created.connect(_worker_connection_lifetime, dispatch_uid="hierarch-worker-connections")


def _outside_a_transaction(connection: Any) -> bool:
    """Neither Django (an atomic block) nor the server (a transaction begun behind Django's
    back) holds a transaction open on the connection."""
    if connection.in_atomic_block:
        return False
    raw = connection.connection
    if connection.vendor != "postgresql":
        return True
    return raw.info.transaction_status == TransactionStatus.IDLE


def release_connections() -> None:
    """Before and after a worker's step: a pooled connection goes back to the pool (which rolls
    back a transaction left open), an unpooled one is closed unless this thread keeps it and
    it is young, sound and outside a transaction."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if _pooled(connection) or not _outside_a_transaction(connection):
            connection.close()
    close_old_connections()


def release_before_waiting() -> None:
    """Before a wait outside the database (a model call, a tool call on the network): this
    thread's pooled connections go back to the pool, so a waiting thread holds none; its next
    query takes one again. One inside a transaction stays (the engine opens none across a
    call; a test's atomic block does), and so does an unpooled one (SQLite: nothing to
    bound)."""
    for connection in connections.all(initialized_only=True):
        pooled = connection.connection is not None and _pooled(connection)
        if pooled and _outside_a_transaction(connection):
            connection.close()


# A wait outside the database this long or longer (a real model's answer) is followed by a
# check of the connection the thread takes next: one round trip, little beside the wait.
CHECK_AFTER_WAIT_S = 1.0


def check_after_waiting(waited_s: float) -> None:
    """After a wait outside the database of CHECK_AFTER_WAIT_S or more (a model call), take a
    pooled connection for this thread and check it, replacing one the database dropped while
    the thread waited (a restart, a failover, a firewall's idle timeout), so that what the
    thread waited for is written instead of lost with a failed step. Nothing when the pool
    checks every connection it hands out itself (DB_CONN_HEALTH_CHECKS=1), or for an
    unpooled connection (Django checks a kept one before a step)."""
    if waited_s < CHECK_AFTER_WAIT_S:
        return
    for connection in connections.all(initialized_only=True):
        if not _pooled(connection) or connection.settings_dict.get("CONN_HEALTH_CHECKS"):
            continue
        pool = connection.settings_dict["OPTIONS"]["pool"]
        tries = int(pool.get("max_size", 1) if isinstance(pool, dict) else 1) + 1
        for _ in range(tries):  # every connection of the pool may have been dropped
            with contextlib.suppress(DatabaseError):  # a query on connecting met it dropped
                connection.ensure_connection()
                if connection.is_usable():
                    break
            connection.close()  # back to the pool, which drops a broken one and opens another


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
    advance, _ = _installed()
    release_connections()
    try:
        advance(run_id)
    except Exception:
        log.exception("advancing run %s failed", run_id)
    finally:
        release_connections()  # kept for the thread's next step, unless too old or broken


def _submit_inline(run_id: str) -> None:
    background.submit(_inline_pool(), _advance_inline, run_id)


# A Celery worker's own hints. A step's hints (the children it started, the parent it woke)
# go to the broker, which hands each to a thread of some worker: a message published, fetched
# by a worker's main loop, acknowledged, each a few Redis round trips and, measured under a
# fan-out on one worker, about a fifth of the worker's CPU. While this worker has threads
# to spare (its steps in flight, Celery's and its own, below its concurrency), a hint goes to
# one of its own threads instead, after the commit all the same. Nothing else changes: the
# run's row is the truth, `advance` claims the run with a lease as from a message, and a hint
# lost with the process (killed before the thread claimed the run) is the sweeper's, as a lost
# message is (a PENDING run nobody claimed, runs.sweeper.PENDING_GRACE). When every thread is
# busy, hints go to the broker and any worker takes them.
_worker_slots = 0  # this process's concurrency when it is a Celery worker; 0: elsewhere
_worker_busy = 0  # steps in flight in this worker: Celery's tasks and its own hints
_worker_lock = threading.Lock()
_worker_pool: ThreadPoolExecutor | None = None


def worker_hints_install(slots: int) -> None:
    """In a Celery worker process (config/celery.py, as the worker starts): hints of its
    own steps may go to its own threads, while fewer than `slots` steps are in flight here.
    0 turns it off (when the worker stops: hints go to the broker again)."""
    global _worker_slots, _worker_pool
    with _worker_lock:
        _worker_slots = slots
        if slots and _worker_pool is None:
            _worker_pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="hierarch-hint")


def worker_task_started() -> None:
    """A Celery task of this worker started (Celery's task_prerun signal)."""
    global _worker_busy
    with _worker_lock:
        _worker_busy += 1


def worker_task_ended() -> None:
    """A Celery task of this worker ended (Celery's task_postrun signal)."""
    global _worker_busy
    with _worker_lock:
        _worker_busy -= 1


def _hint_from_a_worker(run_id: str) -> None:
    """After the commit, in a Celery worker: one of its own threads advances the run if one is
    free, else a message does."""
    global _worker_busy
    with _worker_lock:
        here = _worker_pool is not None and _worker_busy < _worker_slots
        if here:
            _worker_busy += 1
    if here:
        try:
            _worker_pool.submit(_advance_here, run_id)  # type: ignore[union-attr]
            return
        except RuntimeError:  # the process is exiting: the broker has it
            worker_task_ended()
    _installed()[1].delay(run_id)


def _advance_here(run_id: str) -> None:
    try:
        _advance_inline(run_id)  # its connections handed back before and after, as Celery's
    finally:
        worker_task_ended()


def enqueue(run_id: str) -> None:
    """Ask an executor to advance the run once the current transaction commits."""
    if settings.HIERARCH_EXECUTOR == "celery":
        if _worker_slots:
            transaction.on_commit(lambda: _hint_from_a_worker(run_id))
        else:
            _installed()[1].delay_on_commit(run_id)
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
        _installed()[1].apply_async_on_commit((run_id,), countdown=countdown)
        return

    transaction.on_commit(lambda: background.later(countdown, _submit_inline, run_id))
