"""Engine workers keep their database connection from step to step (HIERARCH_ENGINE's
WORKER_CONN_MAX_AGE) instead of opening one per step, and still let go of one that is too old,
broken, or left inside a transaction. Anywhere else a connection lives as DB_CONN_MAX_AGE
says."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from runs import executors
from tests.marks import postgresql_only

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        "a kept connection is told from a new one by its server process "
        "(pg_backend_pid): PostgreSQL (DATABASE_URL)",
    ),
]


def in_a_worker_thread(work):  # noqa: ANN001, ANN201
    return executors._inline_pool().submit(work).result(timeout=30)


def opened_and_released() -> tuple[int, bool]:
    """A step's use of the connection, then what the executor does after a step."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid()" if connection.vendor == "postgresql" else "SELECT 1"
        )
        (backend,) = cursor.fetchone()
    executors.release_connections()
    return backend, connection.connection is not None


def test_an_inline_worker_thread_keeps_its_connection_from_step_to_step(settings):
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 1}
    executors.shutdown_inline_pool()
    try:
        first, kept = in_a_worker_thread(opened_and_released)
        second, still = in_a_worker_thread(opened_and_released)
        assert kept and still
        assert first == second  # the same connection (the same server process) both times

        def aged() -> bool:
            connection.close_at = time.monotonic() - 1
            executors.release_connections()
            return connection.connection is None

        assert in_a_worker_thread(aged), "a connection past WORKER_CONN_MAX_AGE was kept"
    finally:
        executors.shutdown_inline_pool()


def test_stopping_the_inline_pool_closes_the_connections_its_threads_kept(settings):
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 2}
    executors.shutdown_inline_pool()
    pool = executors._inline_pool()
    both = threading.Barrier(2)

    def step() -> int:
        both.wait(timeout=10)  # each step on its own thread
        return opened_and_released()[0]

    backends = {future.result(timeout=30) for future in [pool.submit(step), pool.submit(step)]}
    assert len(backends) == 2
    executors.shutdown_inline_pool()
    # A server process ends a moment after its client hangs up.
    deadline = time.monotonic() + 10
    while (left := still_connected(backends)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"server processes {left} still serve the stopped pool's threads"


def still_connected(backends: set[int]) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(backends)])
        return [pid for (pid,) in cursor.fetchall()]


def test_a_worker_connection_left_inside_a_transaction_is_closed(settings):
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 1}
    executors.shutdown_inline_pool()

    def left_open() -> bool:
        connection.ensure_connection()
        connection.connection.execute("BEGIN")  # behind Django's back, never ended
        executors.release_connections()
        return connection.connection is None

    try:
        assert in_a_worker_thread(left_open)
    finally:
        executors.shutdown_inline_pool()


def test_with_worker_conn_max_age_0_a_worker_closes_its_connection_after_each_step(settings):
    settings.HIERARCH_ENGINE = {
        **settings.HIERARCH_ENGINE,
        "INLINE_WORKERS": 1,
        "WORKER_CONN_MAX_AGE": 0,
    }
    executors.shutdown_inline_pool()
    try:
        _, kept = in_a_worker_thread(opened_and_released)
        assert not kept
    finally:
        executors.shutdown_inline_pool()


def test_outside_a_worker_a_connection_lives_as_db_conn_max_age_says():
    assert connection.settings_dict["CONN_MAX_AGE"] == 0  # the default, as in the tests
    _, kept = opened_and_released()
    assert not kept


def test_a_celery_worker_keeps_its_connection_around_each_task(monkeypatch):
    """Celery's Django fixup would close every connection before and after each task;
    CELERY_DB_REUSE_MAX turns that off and the engine's rule decides."""
    from celery.fixups.django import DjangoWorkerFixup

    from config.celery import _release_database_connections, app
    from runs.tasks import advance_run

    fixup = DjangoWorkerFixup(app)
    assert fixup.db_reuse_max, "Celery would close the connection around every task"
    monkeypatch.setattr(executors, "_process_keeps_connections", True)
    connection.close()
    connection.ensure_connection()  # a worker's new connection
    raw = connection.connection
    assert connection.close_at > time.monotonic() + 60

    for _ in range(3):  # a task's signals, as a worker sends them
        fixup.on_task_prerun(sender=advance_run)
        _release_database_connections(sender=advance_run)
        fixup.on_task_postrun(sender=advance_run)
        _release_database_connections(sender=advance_run)
    assert connection.connection is raw
