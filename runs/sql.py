"""The store's hot statements, written once by hand, for PostgreSQL and SQLite alike.

A step of a run costs a handful of writes; through the ORM each one builds its query anew,
which costs more Python than the database spends on it. These are those few statements:
values are prepared by the models' own fields (`get_db_prep_save`) and rows read back
through the converters the ORM itself applies, so both backends see what the ORM would
send and the engine gets what the ORM would return. Table and column names come from the
models' meta, never from input. Every other query of the store stays on the ORM.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, models

from runs.models import Run, RunEvent, TraceSequence


@contextlib.contextmanager
def _cursor() -> Iterator[Any]:
    """A cursor for these statements. On PostgreSQL it binds parameters on the server and
    prepares each statement on first use (one plan per connection and statement text):
    planning a statement on the run table costs more than running it. Django's own cursors
    bind on the client and never prepare, so connection poolers keep working for the rest;
    these run inside the worker's own connection. The cursor is Django's wrapper around it,
    so errors map to Django's and execute wrappers see each statement."""
    if connection.vendor != "postgresql" or not settings.HIERARCH_ENGINE.get(
        "PREPARE_STATEMENTS", True
    ):
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off; let these statements (prepare=True) prepare, and
        # nothing else: Django's client-binding cursors never prepare.
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    cursor = connection._prepare_cursor(_PreparingCursor(raw))
    try:
        yield cursor
    finally:
        cursor.close()


_ONLY_WHEN_ASKED = 2**31 - 1


class _PreparingCursor(psycopg.Cursor):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("prepare", True)
        return super().execute(query, params, **kwargs)


def quote(name: str) -> str:
    return connection.ops.quote_name(name)


def prep(model: type[models.Model], name: str, value: Any) -> Any:
    """A value as the model's field sends it to this connection's database."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)


def run_id_param(value: Any) -> Any:
    return prep(Run, "id", value)


@functools.cache
def _reader(
    vendor: str, model: type[models.Model], names: tuple[str, ...]
) -> tuple[str, list[tuple[str, list]]]:
    """The column list of `names` and, per column, the ORM's converters for this backend."""
    table = model._meta.db_table
    columns, converters = [], []
    for name in names:
        field = model._meta.get_field(name)
        column = field.get_col(table)
        columns.append(f"{quote(table)}.{quote(field.column)}")
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        converters.append((name, [(convert, column) for convert in found]))
    return ", ".join(columns), converters


def _read(model: type[models.Model], names: tuple[str, ...], row: Sequence[Any]) -> dict[str, Any]:
    _, converters = _reader(connection.vendor, model, names)
    values = {}
    for value, (name, steps) in zip(row, converters, strict=False):
        for convert, column in steps:
            value = convert(value, column, connection)
        values[name] = value
    return values


def select(
    model: type[models.Model],
    names: tuple[str, ...],
    where: str,
    params: list[Any],
    *,
    extra: str = "",
    order: str = "",
) -> list[tuple[dict[str, Any], tuple]]:
    """Rows of `model` (fields `names`, converted as the ORM would) matching `where`, each
    with the raw values of the `extra` columns after them."""
    columns, _ = _reader(connection.vendor, model, names)
    table = quote(model._meta.db_table)
    sql = f"SELECT {columns}{', ' + extra if extra else ''} FROM {table} "  # noqa: S608
    sql += f"WHERE {where}{' ORDER BY ' + order if order else ''}"
    with _cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    width = len(names)
    return [(_read(model, names, row[:width]), tuple(row[width:])) for row in rows]


def marks(values: Sequence[Any]) -> str:
    """`%s, %s, …`, one per value."""
    return ", ".join(["%s"] * len(values))


def claim(
    run_id: str,
    owner: str,
    now: datetime,
    until: datetime,
    *,
    terminal: Iterable[str],
    asleep: Iterable[str],
    names: tuple[str, ...],
) -> dict[str, Any] | None:
    """Take the run's lease in one statement and read it back; None when the run is finished,
    asleep (unless a cancel waits), leased by another owner, or due later.

    `resumed` records whether the lease was still held by someone (a worker that died
    mid-advance): SET reads the row as it was before the statement."""
    terminal, asleep = [str(s) for s in terminal], [str(s) for s in asleep]
    table = quote(Run._meta.db_table)
    columns, _ = _reader(connection.vendor, Run, names)
    entity_table = quote(Run._meta.get_field("entity").related_model._meta.db_table)
    sql = (
        f"UPDATE {table} SET lease_owner = %s, lease_expires_at = %s, wake_at = NULL, "  # noqa: S608
        "resumed = (lease_owner <> '') "
        f"WHERE id = %s AND status NOT IN ({marks(terminal)}) "
        f"AND (cancel_requested OR status NOT IN ({marks(asleep)})) "
        "AND (lease_expires_at IS NULL OR lease_expires_at <= %s OR lease_owner = %s) "
        "AND (wake_at IS NULL OR wake_at <= %s) "
        f"RETURNING {columns}, "
        f"(SELECT e.status FROM {entity_table} e WHERE e.id = {table}.entity_id)"
    )
    moment = prep(Run, "lease_expires_at", now)
    params = [
        owner,
        prep(Run, "lease_expires_at", until),
        run_id_param(run_id),
        *terminal,
        *asleep,
        moment,
        owner,
        moment,
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    found = _read(Run, names, row[:-1])
    found["entity_status"] = row[-1]
    return found


def update_run(run_id: str, owner: str, values: dict[str, Any]) -> bool | None:
    """Write the run's columns if `owner` holds its lease (a fenced write); answer whether a
    cancel was requested, or None when the lease is someone else's."""
    names = tuple(values)
    sql = _update_sql(connection.vendor, names)
    params = [prep(Run, n, values[n]) for n in names]
    with _cursor() as cursor:
        cursor.execute(sql, [*params, run_id_param(run_id), owner])
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


@functools.lru_cache(maxsize=64)
def _update_sql(vendor: str, names: tuple[str, ...]) -> str:
    assignments = ", ".join(f"{quote(Run._meta.get_field(n).column)} = %s" for n in names)
    return (
        f"UPDATE {quote(Run._meta.db_table)} SET {assignments} "  # noqa: S608
        "WHERE id = %s AND lease_owner = %s RETURNING cancel_requested"
    )


def add_counters(
    run_id: str,
    lineage: list[str],
    owner: str,
    until: datetime,
    *,
    cost: Decimal,
    tokens: int,
    llm_calls: int = 0,
    tool_calls: int = 0,
    anchor: str | None = None,
    estimate: Decimal | None = None,
) -> tuple[bool, list[str]] | None:
    """Add a call to the counters of the run and every ancestor and renew the run's lease, in
    one statement fenced on the run's lease. With a budget `anchor` (the nearest run with a
    budget), `estimate` is what `reserve` set aside there for this call: it is given back,
    and every run with a budget above the anchor turns the call's cost from reserved into
    used (it had reserved its child's whole budget).

    Answers the run's cancel flag and the runs whose alert threshold this call crossed, or
    None when the lease is someone else's (nothing is written then)."""
    ids = [run_id_param(value) for value in [run_id, *lineage]]
    mine = run_id_param(run_id)
    price = prep(Run, "total_cost_usd", cost)
    held = prep(Run, "reserved_usd", estimate or Decimal(0))
    sql = _counters_sql(connection.vendor, len(ids))
    params = [
        price,
        tokens,
        llm_calls,
        tool_calls,
        mine,
        prep(Run, "lease_expires_at", until),
        run_id_param(anchor) if anchor else None,
        held,
        price,
        *ids,
        mine,
        owner,
        mine,
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    cancelled = None
    crossed = []
    for row_id, is_mine, flag, total, alert in rows:
        if is_mine:
            cancelled = bool(flag)
        if alert is not None:  # the write that took the cost across the threshold
            total, alert = _dollars(total), _dollars(alert)
            if total >= alert > total - cost:
                crossed.append(str(uuid.UUID(str(row_id))))
    return None if cancelled is None else (cancelled, crossed)


def _dollars(value: Any) -> Decimal:
    """A cost column's value as read back raw (SQLite gives a float) in micro-dollars."""
    return Decimal(str(value)).quantize(Decimal("0.000001"))


@functools.lru_cache(maxsize=32)
def _counters_sql(vendor: str, count: int) -> str:
    return (
        f"UPDATE {quote(Run._meta.db_table)} SET "  # noqa: S608
        "total_cost_usd = total_cost_usd + %s, total_tokens = total_tokens + %s, "
        "llm_calls = llm_calls + %s, tool_calls = tool_calls + %s, "
        "lease_expires_at = CASE WHEN id = %s THEN %s ELSE lease_expires_at END, "
        "reserved_usd = CASE WHEN id = %s THEN reserved_usd - %s "
        "WHEN budget_usd IS NOT NULL THEN reserved_usd - %s ELSE reserved_usd END "
        f"WHERE id IN ({marks(range(count))}) AND (id <> %s OR lease_owner = %s) "
        "RETURNING id, CASE WHEN id = %s THEN 1 ELSE 0 END, cancel_requested, "
        "total_cost_usd, cost_alert_usd"
    )


def reserve(
    run_id: str,
    lineage: list[str],
    *,
    llm_calls: int,
    tool_calls: int,
    anchor: str | None,
    estimate: Decimal,
) -> bool:
    """Count a call before it is made, for the run and every ancestor, and set its estimated
    cost aside at the budget anchor: all or nothing. False (nothing written) when a call
    limit of one of them, or the anchor's budget, has no room for it."""
    ids = [run_id_param(value) for value in [run_id, *lineage]]
    held = prep(Run, "reserved_usd", estimate)
    sql = (
        f"UPDATE {quote(Run._meta.db_table)} SET "  # noqa: S608
        "llm_calls = llm_calls + %s, tool_calls = tool_calls + %s, "
        "reserved_usd = CASE WHEN id = %s THEN reserved_usd + %s ELSE reserved_usd END "
        f"WHERE id IN ({marks(ids)}) "
        "AND (max_llm_calls IS NULL OR llm_calls + %s <= max_llm_calls) "
        "AND (max_tool_calls IS NULL OR tool_calls + %s <= max_tool_calls) "
        "AND (id <> %s OR budget_usd IS NULL OR total_cost_usd + reserved_usd + %s <= budget_usd)"
    )
    anchor_param = run_id_param(anchor) if anchor else None
    params = [
        llm_calls,
        tool_calls,
        anchor_param,
        held,
        *ids,
        llm_calls,
        tool_calls,
        anchor_param,
        held,
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == len(ids)


def unreserve(anchor: str, amount: Decimal) -> None:
    """Give back what was set aside at a budget anchor."""
    with _cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd - %s "  # noqa: S608
            "WHERE id = %s",
            [prep(Run, "reserved_usd", amount), run_id_param(anchor)],
        )


def reserve_budget(anchor: str, amount: Decimal) -> bool:
    """Set a child's budget aside at its parent's anchor; False (nothing written) when the
    anchor's budget has no room for it."""
    held = prep(Run, "reserved_usd", amount)
    with _cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd + %s "  # noqa: S608
            "WHERE id = %s AND total_cost_usd + reserved_usd + %s <= budget_usd",
            [held, run_id_param(anchor), held],
        )
        return cursor.rowcount == 1


def return_budget(run_id: str, parent_id: str) -> None:
    """A run with a budget of its own ends: give what it did not use back to the anchor its
    budget was set aside at (its parent's anchor), whatever became of it."""
    table = quote(Run._meta.db_table)
    sql = (
        f"UPDATE {table} SET reserved_usd = reserved_usd - ("  # noqa: S608
        f"SELECT CASE WHEN c.budget_usd > c.total_cost_usd "
        f"THEN c.budget_usd - c.total_cost_usd ELSE 0 END FROM {table} c WHERE c.id = %s) "
        f"WHERE id = (SELECT p.budget_anchor FROM {table} p WHERE p.id = %s)"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [run_id_param(run_id), run_id_param(parent_id)])


def insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    conflict: Sequence[str] = (),
    update: Sequence[str] = (),
) -> None:
    """INSERT rows (dicts of field names), optionally ON CONFLICT (...) DO UPDATE."""
    if not rows:
        return
    names = tuple(rows[0])
    fields = [model._meta.get_field(name) for name in names]
    sql = _insert_sql(connection.vendor, model, names, len(rows), tuple(conflict), tuple(update))
    params = [
        field.get_db_prep_save(row[name], connection)
        for row in rows
        for name, field in zip(names, fields, strict=True)
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params)


@functools.lru_cache(maxsize=256)
def _insert_sql(
    vendor: str,
    model: type[models.Model],
    names: tuple[str, ...],
    count: int,
    conflict: tuple[str, ...],
    update: tuple[str, ...],
) -> str:
    fields = [model._meta.get_field(name) for name in names]
    row = "(" + ", ".join(["%s"] * len(names)) + ")"
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608
        f"({', '.join(quote(f.column) for f in fields)}) VALUES {', '.join([row] * count)}"
    )
    if conflict:
        targets = ", ".join(quote(model._meta.get_field(n).column) for n in conflict)
        changes = ", ".join(
            f"{quote(column)} = EXCLUDED.{quote(column)}"
            for column in (model._meta.get_field(n).column for n in update)
        )
        sql += f" ON CONFLICT ({targets}) DO UPDATE SET {changes}"
    return sql


def append_events(
    trace_id: str, run_id: str, items: list[tuple[str, dict]], now: datetime
) -> int | None:
    """Number and insert a trace's events; answer the first number, or None when the trace
    has no sequence row yet. The sequence row's update holds its lock until commit, so a
    trace's events commit in the order of their numbers."""
    sequences = quote(TraceSequence._meta.db_table)
    events = quote(RunEvent._meta.db_table)
    trace = prep(TraceSequence, "trace_id", trace_id)
    created = prep(RunEvent, "created_at", now)
    run = prep(RunEvent, "run", run_id)
    count = len(items)
    if connection.vendor == "postgresql":
        # One round trip: take the numbers and insert the rows.
        values = ", ".join(["(%s, %s, %s)"] * count)
        sql = (
            f"WITH s AS (UPDATE {sequences} SET last_seq = last_seq + %s "  # noqa: S608
            "WHERE trace_id = %s RETURNING last_seq) "
            f"INSERT INTO {events} (trace_id, seq, run_id, type, payload, created_at) "
            f"SELECT %s, s.last_seq - %s + v.n, %s, v.type, v.payload, %s "
            f"FROM s, (VALUES {values}) AS v(n, type, payload) RETURNING seq"
        )
        params: list[Any] = [count, trace, trace, count, run, created]
        for index, (kind, payload) in enumerate(items, start=1):
            params += [index, kind, prep(RunEvent, "payload", payload)]
        with _cursor() as cursor:
            cursor.execute(sql, params)
            numbers = [row[0] for row in cursor.fetchall()]
        return min(numbers) if numbers else None
    with _cursor() as cursor:
        cursor.execute(
            f"UPDATE {sequences} SET last_seq = last_seq + %s "  # noqa: S608
            "WHERE trace_id = %s RETURNING last_seq",
            [count, trace],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    first = row[0] - count + 1
    insert(
        RunEvent,
        [
            {
                "trace_id": trace_id,
                "seq": first + index,
                "run": run_id,
                "type": kind,
                "payload": payload,
                "created_at": now,
            }
            for index, (kind, payload) in enumerate(items)
        ],
    )
    return first


def lock_status(run_id: str) -> str | None:
    """Lock a run's row until commit (PostgreSQL; SQLite has one writer) and read its status."""
    table = quote(Run._meta.db_table)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with _cursor() as cursor:
        cursor.execute(f"SELECT status FROM {table} WHERE id = %s{lock}", [run_id_param(run_id)])  # noqa: S608
        row = cursor.fetchone()
    return None if row is None else row[0]


def group_unfinished(parent_id: str, spawn_group: str, terminal: Iterable[str]) -> bool:
    """Whether a child of the spawn group has not ended. A statement of its own, after the
    parent's lock: under READ COMMITTED it sees what siblings committed while it waited."""
    terminal = [str(s) for s in terminal]
    table = quote(Run._meta.db_table)
    sql = (
        f"SELECT 1 FROM {table} WHERE parent_id = %s AND spawn_group = %s "  # noqa: S608
        f"AND status NOT IN ({marks(terminal)}) LIMIT 1"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [run_id_param(parent_id), spawn_group, *terminal])
        return cursor.fetchone() is not None


def release(run_id: str, owner: str) -> None:
    table = quote(Run._meta.db_table)
    with _cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET lease_owner = '', lease_expires_at = NULL "  # noqa: S608
            "WHERE id = %s AND lease_owner = %s",
            [run_id_param(run_id), owner],
        )
