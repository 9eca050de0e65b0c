"""Database connections of engine work (runs/executors.py).

PostgreSQL: every process takes its connections from a pool of at most DB_POOL_MAX_SIZE; a
thread hands its connection back after each step and before each wait outside the database (a
model call, a tool on the network), so threads waiting on models hold none. SQLite (no pool):
an inline executor thread keeps its connection from step to step (HIERARCH_ENGINE's
WORKER_CONN_MAX_AGE) and still lets go of one that is too old or broken. Anywhere else a
connection lives as DB_CONN_MAX_AGE says. (A real worker's connections under load:
tests/reliability/test_connection_pool.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from django.db import OperationalError, connection, connections, transaction

from runs import executors
from runs.engine.ports import ModelReply, ModelRequest
from runs.engine_factory import ReleasingModel, parts
from tests.marks import postgresql_only

pytestmark = pytest.mark.django_db(transaction=True)

pooled = postgresql_only("the connection pool is PostgreSQL's (DATABASE_URL)")
ROOT = Path(__file__).resolve().parents[2]


def in_a_worker_thread(work):  # noqa: ANN001, ANN201
    return executors._inline_pool().submit(work).result(timeout=30)


def backend() -> int | str:
    """Which server process (PostgreSQL) or connection object (SQLite) a query used."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute("SELECT 1")
            return id(connection.connection)
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def opened_and_released() -> tuple[int | str, bool]:
    """A step's use of the connection, then what the executor does after a step."""
    used = backend()
    executors.release_connections()
    return used, connection.connection is not None


@pytest.fixture
def one_inline_thread(settings):
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 1}
    executors.shutdown_inline_pool()
    yield
    executors.shutdown_inline_pool()


@pooled
def test_after_a_step_the_connection_goes_back_to_the_pool_and_the_next_step_reuses_one(
    one_inline_thread,
):
    pool = connection.pool
    used = set()
    for _ in range(5):
        backend_pid, kept = in_a_worker_thread(opened_and_released)
        assert not kept, "a pooled connection stayed with the thread after its step"
        used.add(backend_pid)
    # One step after another, each took a connection the pool held: the pool hands its idle
    # ones out in turn and may grow by one when the test's own connection is out, but five
    # steps on five distinct connections would be no reuse at all.
    assert len(used) < 5, used
    assert len(used) <= pool.get_stats()["pool_size"], (used, pool.get_stats())


@pooled
def test_before_waiting_a_thread_hands_its_connection_back_and_takes_one_again_after():
    backend()
    pool = connection.pool
    taken = pool.get_stats().get("requests_num", 0)
    executors.release_before_waiting()
    assert connection.connection is None
    assert pool.get_stats()["pool_available"] >= 1  # it waits in the pool
    backend()  # the next query takes one from the pool again
    assert pool.get_stats().get("requests_num", 0) == taken + 1
    assert pool.get_stats()["pool_size"] <= pool.max_size


@pooled
def test_inside_a_transaction_the_connection_is_kept_across_a_wait():
    with transaction.atomic():
        first = backend()
        executors.release_before_waiting()
        assert connection.connection is not None
        assert backend() == first
    connection.ensure_connection()
    connection.connection.execute("BEGIN")  # behind Django's back
    executors.release_before_waiting()
    assert connection.connection is not None, "a connection inside a transaction was let go"
    connection.connection.execute("ROLLBACK")


@pooled
def test_a_connection_left_inside_a_transaction_goes_back_to_the_pool_rolled_back(
    one_inline_thread,
):
    def left_open() -> object:
        connection.ensure_connection()
        raw = connection.connection
        raw.execute("BEGIN")  # behind Django's back, never ended
        raw.execute("CREATE TEMPORARY TABLE left_behind (n int)")
        executors.release_connections()
        assert connection.connection is None
        return raw

    raw = in_a_worker_thread(left_open)
    # The pool rolled it back: whoever takes it next finds no transaction and no table.
    assert raw.info.transaction_status.name == "IDLE"
    assert raw.execute("SELECT to_regclass('left_behind')").fetchone() == (None,)


class Watching:
    """A model client of the engine's port that notes whether the calling thread holds a
    database connection while it answers (the offline model, through the gateway)."""

    def __init__(self, model) -> None:  # noqa: ANN001
        self.model = model
        self.held: list[bool] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.held.append(connection.connection is not None)
        return self.model.complete(request)

    def count_tokens(self, model: str, text: str) -> int:
        return self.model.count_tokens(model, text)

    def estimate_cost(self, request: ModelRequest) -> Decimal:
        return self.model.estimate_cost(request)


@pooled
def test_the_engine_wiring_holds_no_connection_while_the_model_answers():
    gateway = parts()[0].model
    watching = Watching(gateway)
    backend()  # the thread holds a connection, as after a step's reads
    reply = ReleasingModel(watching).complete(
        ModelRequest(
            provider="local", model="offline", messages=({"role": "user", "content": "hi"},)
        )
    )
    assert reply.content
    assert watching.held == [False]
    assert ReleasingModel(watching).count_tokens("offline", "four words of text") > 0


class Dropping:
    """A model client whose call lasts while the database drops every connection of the pool,
    as a restart or a failover would (the offline model answers)."""

    def __init__(self, model) -> None:  # noqa: ANN001
        self.model = model

    def complete(self, request: ModelRequest) -> ModelReply:
        params = connection.get_connection_params()
        params.pop("pool", None)
        with psycopg.connect(**params, autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = current_database() AND backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            )
        return self.model.complete(request)


HELLO = ModelRequest(
    provider="local", model="offline", messages=({"role": "user", "content": "hi"},)
)


@pooled
def test_after_a_long_wait_the_thread_replaces_a_connection_the_database_dropped(monkeypatch):
    monkeypatch.setattr(executors, "CHECK_AFTER_WAIT_S", 0.0)  # this call's wait counts as long
    before = backend()

    reply = ReleasingModel(Dropping(parts()[0].model)).complete(HELLO)

    assert reply.content
    assert connection.connection is not None  # taken and checked before the engine writes
    assert backend() not in (before, None)  # a new connection, and the query went through


@pooled
def test_after_a_short_wait_the_connection_is_not_checked(monkeypatch):
    """No round trip after a model that answered at once: the pool does not check what it
    hands out either (DB_CONN_HEALTH_CHECKS off), so a connection dropped meanwhile fails the
    query that meets it, and the pool replaces it."""
    assert not connection.settings_dict["CONN_HEALTH_CHECKS"]
    monkeypatch.setattr(executors, "CHECK_AFTER_WAIT_S", 3600.0)
    backend()

    ReleasingModel(Dropping(parts()[0].model)).complete(HELLO)

    assert connection.connection is None  # nothing taken after the wait
    with pytest.raises(OperationalError):
        backend()
    connection.close()  # the pool drops the broken connection
    executors.check_after_waiting(3600.0)  # what a long wait does: the next one is checked
    assert backend()


@pooled
def test_the_engine_wiring_lets_go_before_a_network_tool_only():
    runner = parts()[1]
    assert runner.before_waiting is executors.release_before_waiting
    waits = {name for name, builtin in runner.builtins.items() if builtin.waits_on_network}
    assert waits == {"http_request"}


SQLITE_THREADS = """
import json, os, sys, time
import django
django.setup()
from django.conf import settings
from django.db import connection
from runs import executors

def step():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    used = id(connection.connection)
    executors.release_connections()
    return used, connection.connection is not None

def aged():
    connection.close_at = time.monotonic() - 1
    executors.release_connections()
    return connection.connection is None

pool = executors._inline_pool()
first, second = (pool.submit(step).result(timeout=30) for _ in range(2))
print(json.dumps({
    "vendor": connection.vendor,
    "kept": [first[1], second[1]],
    "same": first[0] == second[0],
    "aged_closed": pool.submit(aged).result(timeout=30),
}))
executors.shutdown_inline_pool()
"""


@pytest.mark.parametrize("max_age", ["300", "0"])
def test_an_inline_thread_keeps_its_sqlite_connection_from_step_to_step(tmp_path, max_age):
    """SQLite has no pool: an inline executor thread keeps its connection for the next step
    (its PRAGMAs are not run again) until it is older than WORKER_CONN_MAX_AGE; 0 closes it
    after each step. In a process of its own on a SQLite file, whatever this test runs on."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DB_CONN_MAX_AGE")
    }
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="config.settings",
        HIERARCH_INLINE_WORKERS="1",
        HIERARCH_WORKER_CONN_MAX_AGE=max_age,
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", SQLITE_THREADS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["vendor"] == "sqlite"
    if max_age == "0":
        assert seen["kept"] == [False, False]
    else:
        assert seen["kept"] == [True, True]
        assert seen["same"], "the thread opened a new connection for its second step"
        assert seen["aged_closed"], "a connection past WORKER_CONN_MAX_AGE was kept"


def test_stopping_the_inline_pool_lets_go_of_the_connections_its_threads_held(settings):
    settings.HIERARCH_ENGINE = {**settings.HIERARCH_ENGINE, "INLINE_WORKERS": 2}
    executors.shutdown_inline_pool()
    pool = executors._inline_pool()
    both = threading.Barrier(2)
    held = []

    def step() -> None:
        both.wait(timeout=10)  # each step on its own thread
        backend()
        held.append(connections["default"])  # this thread's wrapper

    for future in [pool.submit(step), pool.submit(step)]:
        future.result(timeout=30)
    executors.shutdown_inline_pool()
    assert len(held) == 2 and all(wrapper.connection is None for wrapper in held)


def test_outside_a_worker_a_connection_lives_as_db_conn_max_age_says():
    assert connection.settings_dict["CONN_MAX_AGE"] == 0  # the default, and the pool's rule
    _, kept = opened_and_released()
    assert not kept


def test_a_celery_worker_thread_lets_go_of_its_connection_around_each_task():
    """Celery's Django fix-up closes each thread's connections before and after each task
    (CELERY_DB_REUSE_MAX unset): with the pool that hands them back to it."""
    from celery.fixups.django import DjangoWorkerFixup

    from config.celery import app
    from runs.tasks import advance_run

    fixup = DjangoWorkerFixup(app)
    assert not fixup.db_reuse_max
    for _ in range(3):  # a task's signals, as a worker sends them
        fixup.on_task_prerun(sender=advance_run)
        backend()  # the task's work
        fixup.on_task_postrun(sender=advance_run)
        assert connection.connection is None


def test_the_readme_deploys_the_worker_the_bench_starts_with_steps_in_flight(settings):
    """One command in three places: config/celery.py's WORKER_COMMAND is the README's and the
    one bench/engine.py starts; the settings make it a pool of threads, acknowledged late."""
    from config.celery import WORKER_COMMAND, app

    command = " ".join(WORKER_COMMAND)
    assert f"| `{command}` |" in (ROOT / "README.md").read_text()
    assert "*WORKER_COMMAND]" in (ROOT / "bench" / "engine.py").read_text()
    assert app.conf.worker_pool == "threads"
    assert app.conf.worker_concurrency == settings.CELERY_WORKER_CONCURRENCY >= 32
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
