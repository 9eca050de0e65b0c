"""The two executors behind HIERARCH_EXECUTOR; both call `run_advance(run_id)`.

`inline` runs the engine in a thread pool inside the server process (the embedded default);
`celery` sends a task that a worker picks up. Either way the hint is sent only after the
transaction that made the work commits.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connections, transaction

log = logging.getLogger(__name__)

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


def enqueue(run_id: str) -> None:
    """Ask an executor to advance the run once the current transaction commits."""
    if settings.HIERARCH_EXECUTOR == "celery":
        from runs.tasks import advance_run

        advance_run.delay_on_commit(run_id)
        return
    transaction.on_commit(lambda: _inline_pool().submit(_advance_inline, run_id))


def wait_idle(timeout: float = 30.0) -> None:
    """Test and command helper: wait until the inline pool has no queued work."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool = _pool
        if pool is None or pool._work_queue.empty():  # noqa: SLF001
            return
        time.sleep(0.01)
