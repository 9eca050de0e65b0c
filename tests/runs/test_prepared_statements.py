"""The engine's prepared statements on a worker's connection (runs/sql.py): they stay in step
with the server when psycopg deallocates its own, and they are planned anew as tables grow.
These tests commit for real (transaction=True): the engine's batches only run outside a
transaction."""

from __future__ import annotations

import pytest
from django.db import DataError, connection, transaction

from runs import executors, services, sql
from tests.factories import EntityFactory, WorkspaceFactory
from tests.marks import postgresql_only
from tests.runs.test_engine import Driver, io

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        "PostgreSQL only: SQLite has no prepared statements to keep or plan anew "
        "(CI runs this file on PostgreSQL)",
    ),
]


@pytest.fixture(autouse=True)
def hints(monkeypatch):
    """Runs started here are advanced by the test alone, not by the inline executor too."""
    monkeypatch.setattr(services, "enqueue", lambda run_id: None)
    monkeypatch.setattr(executors, "enqueue", lambda run_id: None)
    monkeypatch.setattr(executors, "enqueue_at", lambda run_id, delay_s: None)


def batched(statement: str, params: list) -> object:
    """One statement in one of the engine's batches (a pipeline, prepared on first use)."""
    with sql.one_trip() as whole:
        assert whole, "not sent as a batch: the test would not test the batches"
        answer = sql._ask(statement, params, lambda cursor: cursor.fetchall())
    return answer.value()


def on_server() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        return {name for (name,) in cursor.fetchall()}


def test_a_rollback_that_deallocates_psycopgs_statements_does_not_break_the_next_batch():
    """psycopg answers a rollback with DEALLOCATE ALL when it holds statements of its own;
    the batches' statements go too, and their next transaction must prepare them again
    instead of failing on a statement the server no longer has."""
    assert batched("SELECT %s::int + 1", [1]) == [(2,)]
    # A statement prepared through psycopg's own cursor (a careful transaction's path).
    assert sql._ask("SELECT %s::int + 2", [1], lambda cursor: cursor.fetchone()).value() == (3,)
    raw = connection.connection
    ours = set(sql._connection_state(raw).prepared.values())
    assert ours and ours <= on_server()

    with pytest.raises(DataError), transaction.atomic():
        connection.cursor().execute("SELECT 1/0")

    assert not ours & on_server(), "psycopg kept the statements: nothing is tested here"
    assert batched("SELECT %s::int + 1", [41]) == [(42,)]
    assert set(sql._connection_state(raw).prepared.values()) <= on_server()


def test_a_run_completes_on_a_connection_whose_statements_were_deallocated():
    acme = WorkspaceFactory(name="Acme", slug="acme")
    EntityFactory(workspace=acme, name="solo", io_contract=io(None, answer="string"))
    top = EntityFactory(workspace=acme, name="top", children=["solo"])
    assert Driver().run(top, {}).status == "COMPLETED"
    sql._ask("SELECT %s::int", [1], lambda cursor: cursor.fetchone()).value()
    with pytest.raises(DataError), transaction.atomic():
        connection.cursor().execute("SELECT 1/0")

    run = Driver().run(top, {})

    assert run.status == "COMPLETED", (run.error_code, run.error_message)


def plan_of(name: str) -> str:
    """The plan the server uses for the prepared statement `name` (its cached generic plan
    once it chose one), for ids 1 to 4."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN EXECUTE {name}(1, 2, 3, 4)")  # a name of the batches', not input
        return "\n".join(line for (line,) in cursor.fetchall())


def test_a_statement_planned_on_an_empty_table_is_planned_again_as_the_table_grows():
    """PostgreSQL keeps a prepared statement's generic plan until the table's statistics
    change; with no statistics (autovacuum off or not yet run; a temporary table is never
    analysed by it), a plan made on an empty table scans the table whole however big it
    grows. The batches' statements are prepared anew after a number of statements."""
    # Wide rows, as the run table's, and four ids, as the counters' update of a run and its
    # ancestors: on an empty table the planner assumes ten pages of such rows, few enough
    # that reading them all costs less than four index lookups.
    pads = ", ".join(f"pad{i} text" for i in range(40))
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE growing (id int PRIMARY KEY, {pads})")
    try:
        update = "UPDATE growing SET pad0 = pad0 WHERE id IN (%s, %s, %s, %s) RETURNING id"
        state = sql._connection_state(connection.connection)
        state.executed, state.replan_after = 0, 100
        for _ in range(8):  # five custom plans, then the generic one, made on an empty table
            batched(update, [1, 2, 3, 4])
        (name,) = [n for (text, _types), n in state.prepared.items() if text == update]
        assert "Seq Scan" in plan_of(name)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO growing (id, pad0) SELECT i, 'x' FROM generate_series(1, 20000) i"
            )
        assert "Seq Scan" in plan_of(name), "the plan was remade: nothing is tested here"

        for _ in range(100):  # past replan_after: the next batch prepares its statements anew
            batched(update, [1, 2, 3, 4])

        (renamed,) = [n for (text, _types), n in state.prepared.items() if text == update]
        assert renamed != name
        assert name not in on_server(), "the old statement was left on the server"
        plan = plan_of(renamed)
        assert "Index" in plan and "Seq Scan" not in plan, plan
        assert state.replan_after == 200  # twice as many statements before the next time
        assert sorted(batched(update, [1, 2, 3, 4])) == [(1,), (2,), (3,), (4,)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE growing")
