"""The engine's prepared statements on a worker's connection (runs/sql.py): psycopg prepares the
engine's statements when HIERARCH_PREPARE_STATEMENTS is on (DATABASES OPTIONS
`prepare_threshold`) and nothing when it is off; the ORM's queries are never prepared; and
the runs tables get fresh planner statistics after migrations and as they grow, which is what
makes PostgreSQL plan the prepared statements again. These tests commit for real
(transaction=True), as a worker does."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import DataError, connection, transaction
from django.db.models.signals import post_migrate

from runs import executors, services, sql, sweeper
from runs.models import Run, TraceSequence
from tests.factories import EntityFactory, WorkspaceFactory
from tests.marks import postgresql_only
from tests.support.queued_runs import Driver
from tests.support.runs import io

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        "PostgreSQL only: SQLite has no prepared statements nor planner statistics to "
        "refresh (CI runs this file on PostgreSQL)",
    ),
]


@pytest.fixture(autouse=True)
def hints(monkeypatch):
    """Runs started here are advanced by the test alone, not by the inline executor too."""
    monkeypatch.setattr(services, "enqueue", lambda run_id: None)
    monkeypatch.setattr(executors, "enqueue", lambda run_id: None)
    monkeypatch.setattr(executors, "enqueue_at", lambda run_id, delay_s: None)


@pytest.fixture
def reconnect():
    """Open a new connection with DATABASES OPTIONS changed (a value of None: the key left
    out, as Django's default); the settings' own after the test."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)

    def reconnect(**changes: object) -> None:
        connection.close()
        connection.close_pool()  # the pool's connections were made with the old options
        options.clear()
        options.update(saved)
        for key, value in changes.items():
            if value is None:
                options.pop(key, None)
            else:
                options[key] = value
        connection.ensure_connection()

    yield reconnect
    connection.close()
    connection.close_pool()
    options.clear()
    options.update(saved)


@pytest.fixture
def top():
    acme = WorkspaceFactory(name="Acme", slug="acme")
    EntityFactory(workspace=acme, name="solo", io_contract=io(None, answer="string"))
    return EntityFactory(workspace=acme, name="top", type="SKILL", children=["solo"])


def runs_to_the_end(top, times: int = 3) -> None:  # noqa: ANN001
    for _ in range(times):  # psycopg prepares a statement once it ran a few times
        run = Driver().run(top, {})
        assert run.status == "COMPLETED", (run.error_code, run.error_message)


def prepared() -> list[str]:
    """The statements prepared on this connection, as the server has them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_the_engines_statements_are_prepared_and_the_orms_are_not(reconnect, top):
    reconnect()  # the settings' own: preparing is on by default
    assert connection.connection.prepare_threshold is not None
    assert prepared() == []

    runs_to_the_end(top)

    statements = prepared()
    # The claim of a run, sent alone at the start of each step.
    claim = f'UPDATE "{Run._meta.db_table}" SET lease_owner = $1'  # noqa: S608 - a model's table
    assert any(statement.startswith(claim) for statement in statements), statements
    # And the writes a transaction sends together in psycopg's pipeline (runs/sql.py
    # `one_trip`): a step's fenced write of its run, and the numbering of its events.
    fenced = f'WITH w AS (UPDATE "{Run._meta.db_table}" SET '  # noqa: S608 - a model's table
    assert any(statement.startswith(fenced) for statement in statements), statements
    events = f'WITH s AS (INSERT INTO "{TraceSequence._meta.db_table}"'  # noqa: S608
    assert any(statement.startswith(events) for statement in statements), statements
    # Every one binds its parameters on the server: none is one of Django's client-bound ones.
    assert all("$1" in statement for statement in statements), statements


def test_nothing_is_prepared_when_the_setting_is_off(reconnect, top):
    reconnect(prepare_threshold=None)  # what HIERARCH_PREPARE_STATEMENTS=0 leaves

    runs_to_the_end(top)

    assert prepared() == []


def test_a_run_completes_after_a_rollback_deallocated_the_statements(reconnect, top):
    """psycopg answers a rollback with DEALLOCATE ALL when it holds prepared statements; it
    prepares them again when they are next used, and the engine's next run works on."""
    reconnect()
    runs_to_the_end(top)
    assert prepared()
    with pytest.raises(DataError), transaction.atomic():
        connection.cursor().execute("SELECT 1/0")
    assert prepared() == [], "psycopg kept the statements: nothing is tested here"

    runs_to_the_end(top)

    assert prepared()


def test_the_sweeper_analyses_the_runs_tables_once_they_have_doubled():
    sql.analyze(grown_only=False)
    assert sql.analyze(grown_only=True) == []  # nothing grew since
    table = TraceSequence._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (trace_id, last_seq) "  # noqa: S608 - a model's table
            "SELECT gen_random_uuid(), 1 FROM generate_series(1, 20000)"
        )

    sweeper.sweep()

    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        assert cursor.fetchone()[0] == 20000  # its statistics count the rows now
    assert sql.analyze(grown_only=True) == []  # and not again until it doubles once more


def last_analysed(model) -> object:  # noqa: ANN001
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_last_analyze_time(%s::regclass)", [model._meta.db_table])
        return cursor.fetchone()[0]


def test_migrations_leave_the_runs_tables_analysed_and_a_flush_does_not():
    runs = apps.get_app_config("runs")
    signal = {"app_config": runs, "verbosity": 0, "interactive": False, "using": "default"}
    before = last_analysed(Run)

    post_migrate.send(sender=runs, **signal)  # as `flush` sends it: no plan
    assert last_analysed(Run) == before

    post_migrate.send(sender=runs, plan=[("a migration", False)], **signal)  # as `migrate`
    after = last_analysed(Run)
    assert after is not None and (before is None or after > before)
