"""The store's hot statements, written once by hand, for PostgreSQL and SQLite alike.

A step of a run costs a handful of writes; through the ORM each one builds its query anew,
which costs more Python than the database spends on it. These are those few statements:
values are prepared by the models' own fields (`get_db_prep_save`) and rows read back
through the converters the ORM itself applies, so both backends see what the ORM would
send and the engine gets what the ORM would return. Table and column names come from the
models' meta, never from input. Every other query of the store stays on the ORM.

On PostgreSQL they run on psycopg's own cursors (`psycopg.Cursor`), which bind their
parameters on the server, so psycopg prepares each of them on the connection once it has
run it `prepare_threshold` times: DATABASES["default"]["OPTIONS"], set from
HIERARCH_PREPARE_STATEMENTS in config/settings.py (None, Django's default, prepares
nothing). Django's own cursors bind on the client and never prepare, whatever the
threshold, so the ORM's queries are sent as Django sends them. psycopg keeps the prepared
statements of each connection itself; nothing here is kept per connection, so connections
may come from a pool and change from one step to the next. A transaction of the store's is
sent in psycopg's pipeline (`one_trip`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models, transaction

from entities.models import Workspace
from runs.models import LLMCall, Run, RunEvent, StepRun, ToolCall, TraceSequence

# Each function takes the thread's connection once (`connections[DEFAULT_DB_ALIAS]`):
# `django.db.connection` is a proxy that looks it up again on every attribute, and these run
# for every statement of every step.


@contextlib.contextmanager
def _cursor(connection: Any = None) -> Iterator[Any]:
    """A cursor for these statements, closed after the block (see `_open_cursor`); errors
    in the block are Django's."""
    connection = connection or connections[DEFAULT_DB_ALIAS]
    batch = _batch_of(connection)
    if batch is not None:
        batch.flush()  # a statement that reads: what is queued first, in the transaction
    cursor = _open_cursor(connection)
    try:
        with connection.wrap_database_errors:
            yield cursor
    finally:
        cursor.close()


def _open_cursor(connection: Any) -> Any:
    """A cursor for these statements: on PostgreSQL psycopg's own, binding on the server (so
    that psycopg may prepare the statement, see the module's docstring).

    While Django logs statements (DEBUG, a test capturing queries) or someone wrapped them
    (`connection.execute_wrapper`: tracing, counting), the cursor is Django's wrapper around
    it, so these statements are logged and wrapped like any other. Else it is psycopg's
    cursor itself (Django's wrapper costs more than the statement's own Python); the callers
    turn its errors into Django's (`_cursor`, `_ask`, `Later`)."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    # What Django's `connection.cursor()` does before it makes a cursor.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    cursor = psycopg.Cursor(connection.connection)
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    if connection.execute_wrappers:
        return connection.make_cursor(cursor)
    connection.validate_no_broken_transaction()
    return cursor


LEASE_LOST = "HR001"  # the SQLSTATE of hierarch_lease_lost() (migration runs/0012)


CLAIM_REFUSED = "HR002"  # the SQLSTATE of hierarch_claim_refused() (migration runs/0013)


def lease_lost(exc: BaseException | None) -> bool:
    """Whether a database error is a fenced write finding the lease someone else's."""
    return _has_sqlstate(exc, LEASE_LOST)


def claim_refused(exc: BaseException | None) -> bool:
    """Whether an error is `claim_waiting` finding the run changed (either backend)."""
    return isinstance(exc, ClaimRefused) or _has_sqlstate(exc, CLAIM_REFUSED)


def _has_sqlstate(exc: BaseException | None, state: str) -> bool:
    while exc is not None:
        if getattr(exc, "sqlstate", None) == state:
            return True
        exc = exc.__cause__
    return False


class ClaimRefused(Exception):
    """`claim_waiting` found the run changed since its worker left it waiting."""


@contextlib.contextmanager
def one_trip(*, careful: bool = False) -> Iterator[bool]:
    """One transaction, sent to the database whole where it can be: yields whether it is.

    On PostgreSQL, outside any other transaction (and unless `careful`), the block's
    statements are queued (`_Batch`) and sent at its end in psycopg's pipeline
    (`Connection.pipeline()`), each on a cursor binding its parameters on the server, so
    psycopg prepares the statements a connection runs again and again (the setting
    HIERARCH_PREPARE_STATEMENTS, see the module's docstring): one round trip, and Django's
    connection stays in autocommit, where the server runs what comes before the pipeline's
    one Sync as one transaction, all or nothing. A step's write is four or five statements:
    one round trip instead of seven (BEGIN, each statement, COMMIT) is most of what the
    database costs the engine's worker. Statements answer through `Later`, read after the
    block. Whatever must stop the transaction is checked by the database itself (the fenced
    writes call hierarch_lease_lost()): an error of any statement undoes them all and is
    raised as Django's error, and an exception of the block's own drops what is queued.
    Hooks given to `on_commit` run after the commit.

    When the block needs the database before its end (an answer read inside it, a query of
    the ORM's, a statement that reads), a transaction of Django's (`atomic()`) is opened
    there and what is queued is sent in it; the rest of the block goes in the same
    transaction, committed at the block's end. The block must not open Django's
    transactions itself.

    Elsewhere, with `careful` (the block needs answers before it commits, or the ORM's row
    locks), while Django logs or wraps statements, or when the setting
    HIERARCH_ENGINE["PIPELINE"] is off: `atomic()`, statement by statement."""
    connection = connections[DEFAULT_DB_ALIAS]
    if (
        careful
        or connection.vendor != "postgresql"
        or connection.in_atomic_block
        or getattr(_current, "batch", None) is not None
        or connection.queries_logged
        or connection.execute_wrappers
        or not settings.HIERARCH_ENGINE.get("PIPELINE", True)
    ):
        with transaction.atomic():
            yield False
        return
    batch = _current.batch = _Batch(connection)
    try:
        with connection.execute_wrapper(batch.before_djangos):
            try:
                yield True
                batch.flush(last=True)
            except BaseException:
                if batch.opened is not None:  # Django rolls its transaction back
                    batch.opened.__exit__(*sys.exc_info())
                raise
            if batch.opened is not None:
                batch.opened.close()  # Django commits
    finally:
        _current.batch = None
    for hook in batch.hooks:
        hook()


_current = threading.local()  # the thread's `one_trip` batch (Django's connections are per thread)


class _Batch:
    """The statements of a `one_trip` block, queued to be sent together."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.statements: list[tuple[str, Sequence[Any]]] = []
        self.answers: list[_Answer] = []
        self.hooks: list[Callable[[], None]] = []
        self.opened: contextlib.ExitStack | None = None  # Django's atomic(), when opened

    def add(self, sql: str, params: Sequence[Any]) -> _Answer:
        answer = _Answer(self)
        self.statements.append((sql, params))
        self.answers.append(answer)
        return answer

    def flush(self, *, last: bool = False) -> None:
        """Send what is queued: at the block's end (`last`) as it is, else in a transaction
        of Django's, opened now for the rest of the block."""
        if not last and self.opened is None:
            if self.connection.in_atomic_block:
                raise transaction.TransactionManagementError(
                    "a transaction was opened inside a one_trip block"
                )
            self.opened = contextlib.ExitStack()
            self.opened.enter_context(transaction.atomic(using=self.connection.alias))
        if not self.statements:
            return
        statements, answers = self.statements, self.answers
        self.statements, self.answers = [], []
        self.connection.ensure_connection()
        raw = self.connection.connection
        # A cursor each: a pipeline's results land in the cursor that sent the statement.
        cursors = [psycopg.Cursor(raw) for _ in statements]
        try:
            with self.connection.wrap_database_errors, raw.pipeline():
                # Sent as they come and answered together at the pipeline's end (its Sync):
                # outside Django's transaction the server runs them as one.
                for cursor, (sql, params) in zip(cursors, statements, strict=True):
                    cursor.execute(sql, params)
            for answer, cursor in zip(answers, cursors, strict=True):
                answer.take(cursor)
        finally:
            for cursor in cursors:
                cursor.close()

    def before_djangos(self, execute: Any, sql: Any, params: Any, many: Any, context: Any) -> Any:
        """A statement through Django's cursors inside the block: what is queued goes first,
        in the block's transaction."""
        self.flush()
        return execute(sql, params, many, context)


class _Answer:
    """A queued statement's answer, read as from a cursor once its batch is sent."""

    __slots__ = ("_rowcount", "batch", "rows")

    def __init__(self, batch: _Batch) -> None:
        self.batch = batch
        self.rows: list[tuple] | None = None
        self._rowcount = -1

    def take(self, cursor: Any) -> None:
        self.rows = cursor.fetchall() if cursor.description is not None else []
        self._rowcount = cursor.rowcount

    def _answered(self) -> list[tuple]:
        if self.rows is None:
            self.batch.flush()  # asked inside the block: sent now, in its transaction
        return self.rows or []

    @property
    def rowcount(self) -> int:
        """The rows the statement changed: asked inside the block, it is sent first (as its
        rows are), never the -1 of a statement not sent yet."""
        self._answered()
        return self._rowcount

    def fetchall(self) -> list[tuple]:
        return self._answered()

    def fetchone(self) -> tuple | None:
        rows = self._answered()
        return rows[0] if rows else None

    def close(self) -> None:
        pass


def on_commit(hook: Callable[[], None]) -> None:
    """Run `hook` after the commit of the transaction in progress (`one_trip`'s or Django's)."""
    batch = getattr(_current, "batch", None)
    if batch is not None:
        batch.hooks.append(hook)
    else:
        transaction.on_commit(hook)


def _batch_of(connection: Any) -> _Batch | None:
    batch = getattr(_current, "batch", None)
    return batch if batch is not None and batch.connection is connection else None


class Later:
    """A statement's answer, read from its cursor when first asked (see `one_trip`)."""

    __slots__ = ("_connection", "_cursor", "_read", "_value")
    _UNREAD = object()

    def __init__(self, cursor: Any, read: Callable[[Any], Any], connection: Any = None):
        self._cursor, self._read, self._value = cursor, read, Later._UNREAD
        self._connection = connection

    @classmethod
    def known(cls, value: Any) -> Later:
        later = cls(None, lambda _cursor: value)
        later._value = value
        return later

    def value(self) -> Any:
        if self._value is Later._UNREAD:
            connection = self._connection or connections[DEFAULT_DB_ALIAS]
            try:
                with connection.wrap_database_errors:
                    self._value = self._read(self._cursor)
            finally:
                self._cursor.close()
        return self._value


def _ask(connection: Any, sql: str, params: list[Any], read: Callable[[Any], Any]) -> Later:
    """Execute a statement whose answer `read` takes from the cursor: at once, or once its
    batch is sent inside `one_trip` (when it is asked for)."""
    batch = _batch_of(connection)
    if batch is not None:
        return Later(batch.add(sql, params), read, connection)
    with _cursor(connection) as cursor:  # read at once: SQLite's cursor is live until read
        cursor.execute(sql, params)
        return Later.known(read(cursor))


def _send(connection: Any, sql: str, params: Sequence[Any]) -> None:
    """Execute a statement whose answer nobody reads: queued inside `one_trip`."""
    batch = _batch_of(connection)
    if batch is not None:
        batch.add(sql, params)
        return
    with _cursor(connection) as cursor:
        cursor.execute(sql, params)


@functools.cache
def quote(name: str) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


def prep(model: type[models.Model], name: str, value: Any, connection: Any = None) -> Any:
    """A value as sent to the database for the model's field: on PostgreSQL a value of a
    plain type (`_PLAIN`, or an aware datetime) as it is, for psycopg to adapt as it adapts
    any (the column's type takes it: a UUID's text is a uuid), else as the field prepares it
    (`get_db_prep_save`), which JSON columns and SQLite's values always are. On `connection`,
    the thread's by default (the statements below pass theirs, looked up once: Django's
    lookup costs more than preparing most values)."""
    plain = _plain_types(model, name)
    if type(value) in plain or (type(value) is datetime and datetime in plain and value.tzinfo):
        return value
    return _field(model, name).get_db_prep_save(value, connection or connections[DEFAULT_DB_ALIAS])


# What psycopg sends as the ORM would have it sent: a step sends about a hundred values,
# and a field's preparation costs more than its statement's share of the round trip.
_PLAIN = frozenset({str, int, bool, float, Decimal, uuid.UUID, type(None), datetime})


@functools.cache
def _field(model: type[models.Model], name: str) -> Any:
    return model._meta.get_field(name)


@functools.cache
def _plain_types(model: type[models.Model], name: str) -> frozenset[type]:
    """The types of value `prep` sends as they are for the field: on PostgreSQL the plain
    ones, less text for a uuid column (a UUID's text in a VALUES list would be text);
    nothing for a JSON column or on SQLite."""
    field = _field(model, name)
    target = field.target_field if field.is_relation else field
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql" or isinstance(field, models.JSONField):
        return frozenset()
    return _PLAIN - {str} if isinstance(target, models.UUIDField) else _PLAIN


def run_id_param(value: Any, connection: Any = None) -> Any:
    return prep(Run, "id", value, connection)


@functools.cache
def _reader(
    vendor: str, model: type[models.Model], names: tuple[str, ...]
) -> tuple[str, list[tuple[str, list]]]:
    """The column list of `names` and, per column, the ORM's converters for this backend."""
    connection = connections[DEFAULT_DB_ALIAS]
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
    connection = connections[DEFAULT_DB_ALIAS]
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
    connection = connections[DEFAULT_DB_ALIAS]
    columns, _ = _reader(connection.vendor, model, names)
    table = quote(model._meta.db_table)
    sql = f"SELECT {columns}{', ' + extra if extra else ''} FROM {table} "  # noqa: S608
    sql += f"WHERE {where}{' ORDER BY ' + order if order else ''}"
    with _cursor(connection) as cursor:
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
) -> Later:
    """Take the run's lease in one statement and read it back (`Later`); None when the run is
    finished, asleep (unless a cancel waits), leased by another owner, or due later.

    `resumed` records whether the lease was still held by someone (a worker that died
    mid-advance): SET reads the row as it was before the statement."""
    connection = connections[DEFAULT_DB_ALIAS]
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
    moment = prep(Run, "lease_expires_at", now, connection)
    params = [
        owner,
        prep(Run, "lease_expires_at", until, connection),
        run_id_param(run_id, connection),
        *terminal,
        *asleep,
        moment,
        owner,
        moment,
    ]
    return _ask(connection, sql, params, functools.partial(_claimed, names=names))


def claim_waiting(run_id: str, owner: str, claim: Claim) -> None:
    """Take the lease of a run waiting on its children as this worker left it (the same
    step, pass and attempt, the same deadline, no cancel asked, nobody holding it), or abort
    the transaction: on PostgreSQL the database raises (SQLSTATE HR002) and the transaction
    sent whole aborts on the server; elsewhere `ClaimRefused` is raised here."""
    connection = connections[DEFAULT_DB_ALIAS]
    table = quote(Run._meta.db_table)
    sql = (
        f"UPDATE {table} SET lease_owner = %s, lease_expires_at = %s, wake_at = NULL, "  # noqa: S608
        f"resumed = (lease_owner <> '') WHERE id = %s AND {_CLAIMABLE} RETURNING id"
    )
    terms = _claim_terms(claim, owner, connection)
    params = [owner, terms[0], run_id_param(run_id, connection), *terms[1:]]
    if connection.vendor == "postgresql":
        sql = (
            f"WITH c AS ({sql}) SELECT 1 FROM c UNION ALL "  # noqa: S608
            "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM c) AND hierarch_claim_refused(%s)"
        )
        params.append(str(run_id))
    if connection.vendor == "postgresql":
        _send(connection, sql, params)  # the database refuses
        return
    with _cursor(connection) as cursor_:
        cursor_.execute(sql, params)
        if cursor_.fetchone() is None:
            raise ClaimRefused(f"run {run_id} changed since this worker left it waiting")


def _claimed(cursor: Any, *, names: tuple[str, ...]) -> dict[str, Any] | None:
    row = cursor.fetchone()
    if row is None:
        return None
    found = _read(Run, names, row[:-1])
    found["entity_status"] = row[-1]
    return found


@dataclasses.dataclass(frozen=True)
class Claim:
    """The terms of `claim_waiting`: a waiting run as a worker left it."""

    now: datetime
    until: datetime
    cursor: int
    iteration: int
    attempt: int
    deadline: datetime | None


def update_run(
    run_id: str, owner: str, values: dict[str, Any], *, claim: Claim | None = None
) -> Later:
    """Write the run's columns if `owner` holds its lease (a fenced write); answer (`Later`)
    whether a cancel was requested, or None when the lease is someone else's.

    With `claim`, the run's lease is taken first on the terms of `claim_waiting`, which
    refuses as it does: on PostgreSQL the claim and the write are one statement."""
    connection = connections[DEFAULT_DB_ALIAS]
    if claim is not None and connection.vendor != "postgresql":
        claim_waiting(run_id, owner, claim)
        claim = None
    names = tuple(values)
    sql = _update_sql(connection.vendor, names, claimed=claim is not None)
    params = [
        *(prep(Run, name, values[name], connection) for name in names),
        run_id_param(run_id, connection),
    ]
    if claim is not None:
        terms = _claim_terms(claim, owner, connection)
        taken = {"lease_owner": owner, "lease_expires_at": terms[0]}
        params[len(names) : len(names)] = [taken[n] for n in _TAKEN if n not in names]
        params += [*terms[1:], str(run_id)]
        return _ask(connection, sql, params, _cancel_flag)
    params.append(owner)
    if connection.vendor == "postgresql":
        params.append(str(run_id))
    return _ask(connection, sql, params, _cancel_flag)


def _claim_terms(claim: Claim, owner: str, connection: Any) -> list[Any]:
    """The parameters of a claim's conditions: the lease's end, then the WHERE's after the
    run's id."""
    moment = prep(Run, "lease_expires_at", claim.now, connection)
    return [
        prep(Run, "lease_expires_at", claim.until, connection),
        "WAITING",
        prep(Run, "cursor", claim.cursor, connection),
        prep(Run, "iteration", claim.iteration, connection),
        prep(Run, "attempt", claim.attempt, connection),
        prep(Run, "deadline_at", claim.deadline, connection),
        moment,
        owner,
        moment,
    ]


_TAKEN = ("lease_owner", "lease_expires_at")  # what a claim sets, in this order
# A waiting run as its worker left it: the same step, pass, attempt and deadline, no cancel
# asked, nobody holding it, not asleep.
_CLAIMABLE = (
    "status = %s AND NOT cancel_requested AND cursor = %s "
    "AND iteration = %s AND attempt = %s AND deadline_at IS NOT DISTINCT FROM %s "
    "AND (lease_expires_at IS NULL OR lease_expires_at <= %s OR lease_owner = %s) "
    "AND (wake_at IS NULL OR wake_at <= %s)"
)


def _cancel_flag(cursor: Any) -> bool | None:
    row = cursor.fetchone()
    return None if row is None else bool(row[0])


@functools.lru_cache(maxsize=64)
def _update_sql(vendor: str, names: tuple[str, ...], *, claimed: bool = False) -> str:
    assignments = ", ".join(f"{quote(Run._meta.get_field(n).column)} = %s" for n in names)
    if claimed:  # PostgreSQL: the claim's SET where the write sets nothing else
        taken = [f"{name} = %s" for name in _TAKEN if name not in names]
        taken.append("resumed = (lease_owner <> '')")
        if "wake_at" not in names:
            taken.append("wake_at = NULL")
        sql = (
            f"UPDATE {quote(Run._meta.db_table)} SET {assignments}, {', '.join(taken)} "  # noqa: S608
            f"WHERE id = %s AND {_CLAIMABLE} RETURNING cancel_requested"
        )
        return (
            f"WITH w AS ({sql}) SELECT cancel_requested FROM w "  # noqa: S608
            "UNION ALL SELECT hierarch_claim_refused(%s) WHERE NOT EXISTS (SELECT 1 FROM w)"
        )
    sql = (
        f"UPDATE {quote(Run._meta.db_table)} SET {assignments} "  # noqa: S608
        "WHERE id = %s AND lease_owner = %s RETURNING cancel_requested"
    )
    if vendor != "postgresql":
        return sql
    # No row written: the lease is someone else's, and the transaction aborts on the server.
    return (
        f"WITH w AS ({sql}) SELECT cancel_requested FROM w "  # noqa: S608
        "UNION ALL SELECT hierarch_lease_lost(%s) WHERE NOT EXISTS (SELECT 1 FROM w)"
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
    record: tuple[str, list[Any]] | None = None,
) -> Later:
    """Add a call to the counters of the run and every ancestor and renew the run's lease, in
    one statement fenced on the run's lease. With a budget `anchor` (the nearest run with a
    budget), `estimate` is what `reserve` set aside there for this call: it is given back,
    and every run with a budget above the anchor turns the call's cost from reserved into
    used (it had reserved its child's whole budget).

    Answers (`Later`) the run's cancel flag, the runs whose alert threshold this call
    crossed and the cancel flag of every ancestor by id, or None when the lease is someone
    else's (nothing is written then).

    `record` (an `insert_statement`: the call's record) goes in with the counters: on
    PostgreSQL in the same statement, so a record and its count are one statement."""
    connection = connections[DEFAULT_DB_ALIAS]
    ids = [run_id_param(value, connection) for value in [run_id, *lineage]]
    mine = run_id_param(run_id, connection)
    price = prep(Run, "total_cost_usd", cost, connection)
    held = prep(Run, "reserved_usd", estimate or Decimal(0), connection)
    sql = _counters_sql(connection.vendor, len(ids))
    params = [
        price,
        tokens,
        llm_calls,
        tool_calls,
        mine,
        prep(Run, "lease_expires_at", until, connection),
        run_id_param(anchor, connection) if anchor else None,
        held,
        price,
        *ids,
        mine,
        owner,
        mine,
    ]
    if connection.vendor == "postgresql":
        params += [str(run_id), mine]
        if record is not None:
            sql = _with_record(record[0], sql)
            params = [*record[1], *params]
    elif record is not None:
        with _cursor(connection) as cursor:
            cursor.execute(*record)
    return _ask(connection, sql, params, functools.partial(_counted, cost=cost))


@functools.lru_cache(maxsize=64)
def _with_record(record: str, counters: str) -> str:
    """The counters' statement (`WITH c AS (UPDATE …) SELECT …`) inserting `record` too: a
    data-modifying WITH query runs to its end whether or not the rest reads it."""
    return f"WITH r AS ({record}), {counters.removeprefix('WITH ')}"


def _counted(cursor: Any, *, cost: Decimal) -> tuple[bool, list[str], dict[str, bool]] | None:
    cancelled = None
    crossed = []
    ancestors = {}
    for row_id, is_mine, flag, total, alert in cursor.fetchall():
        if is_mine:
            cancelled = bool(flag)
        elif row_id is not None:
            ancestors[str(uuid.UUID(str(row_id)))] = bool(flag)
        if alert is not None:  # the write that took the cost across the threshold
            total, alert = _dollars(total), _dollars(alert)
            if total >= alert > total - cost:
                crossed.append(str(uuid.UUID(str(row_id))))
    return None if cancelled is None else (cancelled, crossed, ancestors)


def _dollars(value: Any) -> Decimal:
    """A cost column's value as read back raw (SQLite gives a float) in micro-dollars."""
    return Decimal(str(value)).quantize(Decimal("0.000001"))


@functools.lru_cache(maxsize=32)
def _counters_sql(vendor: str, count: int) -> str:
    sql = (
        f"UPDATE {quote(Run._meta.db_table)} SET "  # noqa: S608
        "total_cost_usd = total_cost_usd + %s, total_tokens = total_tokens + %s, "
        "llm_calls = llm_calls + %s, tool_calls = tool_calls + %s, "
        "lease_expires_at = CASE WHEN id = %s THEN %s ELSE lease_expires_at END, "
        "reserved_usd = CASE WHEN id = %s THEN reserved_usd - %s "
        "WHEN budget_usd IS NOT NULL THEN reserved_usd - %s ELSE reserved_usd END "
        f"WHERE id IN ({marks(range(count))}) AND (id <> %s OR lease_owner = %s) "
        "RETURNING id, CASE WHEN id = %s THEN 1 ELSE 0 END AS mine, cancel_requested, "
        "total_cost_usd, cost_alert_usd"
    )
    if vendor != "postgresql":
        return sql
    # The run's own row not written: its lease is someone else's; abort on the server.
    return (
        f"WITH c AS ({sql}) SELECT * FROM c UNION ALL "  # noqa: S608
        "SELECT NULL, 1, hierarch_lease_lost(%s), NULL, NULL "
        "WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.id = %s)"
    )


def reserve(
    run_id: str,
    lineage: list[str],
    *,
    llm_calls: int,
    tool_calls: int,
    anchor: str | None,
    estimate: Decimal,
) -> Later:
    """Count a call before it is made, for the run and every ancestor, and set its estimated
    cost aside at the budget anchor: all or nothing. False (`Later`; nothing written) when a call
    limit of one of them, or the anchor's budget, has no room for it.

    One UPDATE, each row checking its own limits under its lock; a row without room is left
    out, and then the statement is undone whole: on PostgreSQL by hierarch_no_room() (in a
    savepoint inside a transaction, alone otherwise), on SQLite in a transaction of its own."""
    connection = connections[DEFAULT_DB_ALIAS]
    ids = [run_id_param(value, connection) for value in [run_id, *lineage]]
    held = prep(Run, "reserved_usd", estimate, connection)
    update = (
        f"UPDATE {quote(Run._meta.db_table)} SET "  # noqa: S608
        "llm_calls = llm_calls + %s, tool_calls = tool_calls + %s, "
        "reserved_usd = CASE WHEN id = %s THEN reserved_usd + %s ELSE reserved_usd END "
        f"WHERE id IN ({marks(ids)}) "
        "AND (max_llm_calls IS NULL OR llm_calls + %s <= max_llm_calls) "
        "AND (max_tool_calls IS NULL OR tool_calls + %s <= max_tool_calls) "
        "AND (id <> %s OR budget_usd IS NULL OR total_cost_usd + reserved_usd + %s <= budget_usd)"
    )
    anchor_param = run_id_param(anchor, connection) if anchor else None
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
    try:
        if connection.vendor == "postgresql":
            _reserve_whole(connection, update, params, len(ids), run_id)
        else:
            with transaction.atomic(using=connection.alias), _cursor(connection) as cursor:
                cursor.execute(update, params)
                if cursor.rowcount != len(ids):
                    raise _NoRoom
    except _NoRoom:
        return Later.known(False)
    except DatabaseError as exc:
        if not _has_sqlstate(exc, NO_ROOM):
            raise
        return Later.known(False)
    return Later.known(True)


NO_ROOM = "HR003"  # the SQLSTATE of hierarch_no_room() (migration runs/0014)


class _NoRoom(Exception):
    """A reservation on SQLite found a run without room: its transaction is rolled back."""


def _reserve_whole(connection: Any, update: str, params: list[Any], rows: int, run_id: str) -> None:
    sql = (
        f"WITH u AS ({update} RETURNING 1) "  # noqa: S608 - our own statement
        "SELECT CASE WHEN count(*) = %s THEN true ELSE hierarch_no_room(%s) END FROM u"
    )
    whole = [*params, rows, str(run_id)]
    batch = _batch_of(connection)
    if batch is not None:
        batch.flush()  # what is queued goes first, in the transaction it opens
    if connection.in_atomic_block:  # the error must undo this statement, not the transaction
        with transaction.atomic(using=connection.alias), _cursor(connection) as cursor:
            cursor.execute(sql, whole)
        return
    with _cursor(connection) as cursor:  # autocommit: the statement is its own transaction
        cursor.execute(sql, whole)


def _changed(cursor: Any, *, rows: int) -> bool:
    return cursor.rowcount == rows


def unreserve(anchor: str, amount: Decimal) -> None:
    """Give back what was set aside at a budget anchor."""
    connection = connections[DEFAULT_DB_ALIAS]
    _send(
        connection,
        f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd - %s "  # noqa: S608
        "WHERE id = %s",
        [prep(Run, "reserved_usd", amount, connection), run_id_param(anchor, connection)],
    )


def reserve_budget(anchor: str, amount: Decimal) -> Later:
    """Set a child's budget aside at its parent's anchor; False (`Later`; nothing written)
    when the anchor's budget has no room for it."""
    connection = connections[DEFAULT_DB_ALIAS]
    held = prep(Run, "reserved_usd", amount, connection)
    return _ask(
        connection,
        f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd + %s "  # noqa: S608
        "WHERE id = %s AND total_cost_usd + reserved_usd + %s <= budget_usd",
        [held, run_id_param(anchor, connection), held],
        functools.partial(_changed, rows=1),
    )


def _month_spent(table: str) -> str:
    """What the workspace's root runs created since a time cost (`_within_quotas`' figure):
    a scalar subquery taking the workspace's id and the time."""
    return (
        f"(SELECT COALESCE(SUM(r.total_cost_usd), 0) FROM {table} r "  # noqa: S608
        "WHERE r.workspace_id = %s AND r.parent_id IS NULL AND r.created_at >= %s)"
    )


def quota_hold(workspace_id: int, amount: Decimal, month_start: datetime) -> Later:
    """Check a spawn's hires against the workspace's monthly cost quota and set `amount`
    (their budgets that count against it) aside, in one conditional UPDATE of the
    workspace's row (runs/engine/limits.py `quota_room`; with nothing to set aside, a read):
    False (`Later`; nothing written) when the quota has no room. Two hires at once take
    turns on the row, and the second reads what the first set aside (PostgreSQL re-reads a
    row it waited for)."""
    connection = connections[DEFAULT_DB_ALIAS]
    held = prep(Workspace, "quota_held_usd", amount, connection)
    spent = _month_spent(quote(Run._meta.db_table))
    quota = "monthly_cost_quota_usd"
    since = prep(Run, "created_at", month_start, connection)
    room = f"{quota} IS NULL OR {spent} < {quota}"  # nothing was spent past it this month
    table = quote(Workspace._meta.db_table)
    if not amount:  # nothing to hold: a read, which locks nothing
        return _ask(
            connection,
            f"SELECT 1 FROM {table} WHERE id = %s AND ({room})",  # noqa: S608
            [workspace_id, workspace_id, since],
            _found,
        )
    # ... and the budgets fit with what hires under way hold
    room = f"{quota} IS NULL OR ({spent} < {quota} AND {spent} + quota_held_usd + %s <= {quota})"
    return _ask(
        connection,
        f"UPDATE {table} SET quota_held_usd = quota_held_usd + %s "  # noqa: S608
        f"WHERE id = %s AND ({room})",
        [held, workspace_id, workspace_id, since, workspace_id, since, held],
        functools.partial(_changed, rows=1),
    )


def _found(cursor: Any) -> bool:
    return cursor.fetchone() is not None


def quota_figures(
    workspace_id: int, month_start: datetime
) -> tuple[str, Decimal, Decimal, Decimal]:
    """The workspace's name, monthly cost quota, what it spent this month and what hires
    hold of it (for a refusal's message)."""
    connection = connections[DEFAULT_DB_ALIAS]
    spent = _month_spent(quote(Run._meta.db_table))
    with _cursor(connection) as cursor:
        cursor.execute(
            f"SELECT name, monthly_cost_quota_usd, {spent}, quota_held_usd "  # noqa: S608
            f"FROM {quote(Workspace._meta.db_table)} WHERE id = %s",
            [workspace_id, prep(Run, "created_at", month_start, connection), workspace_id],
        )
        name, quota, used, held = cursor.fetchone()
    return name, _dollars(quota), _dollars(used), _dollars(held)


def quota_release(workspace_id: int, amount: Decimal) -> None:
    """A hire that held part of its workspace's monthly cost quota ended: give it back."""
    connection = connections[DEFAULT_DB_ALIAS]
    _send(
        connection,
        f"UPDATE {quote(Workspace._meta.db_table)} "  # noqa: S608
        "SET quota_held_usd = quota_held_usd - %s WHERE id = %s",
        [prep(Workspace, "quota_held_usd", amount, connection), workspace_id],
    )


def return_budget(run_id: str, parent_id: str) -> None:
    """A run with a budget of its own ends: give what it did not use back to the anchor its
    budget was set aside at (its parent's anchor), whatever became of it."""
    connection = connections[DEFAULT_DB_ALIAS]
    table = quote(Run._meta.db_table)
    sql = (
        f"UPDATE {table} SET reserved_usd = reserved_usd - ("  # noqa: S608
        f"SELECT CASE WHEN c.budget_usd > c.total_cost_usd "
        f"THEN c.budget_usd - c.total_cost_usd ELSE 0 END FROM {table} c WHERE c.id = %s) "
        f"WHERE id = (SELECT p.budget_anchor FROM {table} p WHERE p.id = %s)"
    )
    _send(connection, sql, [run_id_param(run_id, connection), run_id_param(parent_id, connection)])


def insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    conflict: Sequence[str] = (),
    update: Sequence[str] = (),
) -> None:
    """INSERT rows (dicts of field names), optionally ON CONFLICT (...) DO UPDATE. A value
    may be `Computed`: the database works it out as the row goes in (the same expression for
    the column in every row)."""
    statement = insert_statement(model, rows, conflict=conflict, update=update)
    if statement is not None:
        _send(connections[DEFAULT_DB_ALIAS], *statement)


def insert_statement(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    conflict: Sequence[str] = (),
    update: Sequence[str] = (),
) -> tuple[str, list[Any]] | None:
    """The statement of `insert` and its parameters, to send alone or with another."""
    if not rows:
        return None
    connection = connections[DEFAULT_DB_ALIAS]
    names = tuple(rows[0])
    shape = tuple(v.sql if isinstance(v, Computed) else None for v in rows[0].values())
    sql = _insert_sql(
        connection.vendor, model, names, len(rows), tuple(conflict), tuple(update), shape
    )
    params: list[Any] = []
    for row in rows:
        for name in names:
            value = row[name]
            if isinstance(value, Computed):
                params.extend(value.params)
            else:
                params.append(prep(model, name, value, connection))
    return sql, params


@dataclasses.dataclass(frozen=True)
class Computed:
    """A value the database computes as the row is inserted: an SQL expression and its
    parameters (for `insert`)."""

    sql: str
    params: tuple[Any, ...] = ()


@functools.lru_cache(maxsize=256)
def _insert_sql(
    vendor: str,
    model: type[models.Model],
    names: tuple[str, ...],
    count: int,
    conflict: tuple[str, ...],
    update: tuple[str, ...],
    shape: tuple[str | None, ...] = (),
) -> str:
    fields = [model._meta.get_field(name) for name in names]
    row = "(" + ", ".join(computed or "%s" for computed in shape or [None] * len(names)) + ")"
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
) -> Later:
    """Number and insert a trace's events of one run; answer (`Later`) the first number."""
    return append_rows(trace_id, [(run_id, kind, payload) for kind, payload in items], now)


def append_rows(trace_id: str, rows: list[tuple[str, str, dict]], now: datetime) -> Later:
    """Number and insert a trace's events, each `(run_id, type, payload)`, in one statement;
    answer (`Later`) the first number. The trace's sequence row (made on its first events)
    holds its lock until commit, so a trace's events commit in the order of their
    numbers."""
    connection = connections[DEFAULT_DB_ALIAS]
    sequences = quote(TraceSequence._meta.db_table)
    events = quote(RunEvent._meta.db_table)
    trace = prep(TraceSequence, "trace_id", trace_id, connection)
    created = prep(RunEvent, "created_at", now, connection)
    count = len(rows)
    if connection.vendor == "postgresql":
        # One statement: take the numbers (making the trace's row on its first events) and
        # insert the rows.
        values = ", ".join(["(%s, %s, %s, %s)"] * count)
        sql = (
            f"WITH s AS (INSERT INTO {sequences} AS q (trace_id, last_seq) "  # noqa: S608
            "VALUES (%s, %s) ON CONFLICT (trace_id) DO UPDATE "
            "SET last_seq = q.last_seq + EXCLUDED.last_seq RETURNING last_seq) "
            f"INSERT INTO {events} (trace_id, seq, run_id, type, payload, created_at) "
            f"SELECT %s, s.last_seq - %s + v.n, v.run_id, v.type, v.payload, %s "
            f"FROM s, (VALUES {values}) AS v(n, run_id, type, payload) RETURNING seq"
        )
        params: list[Any] = [trace, count, trace, count, created]
        for index, (run_id, kind, payload) in enumerate(rows, start=1):
            params += [
                index,
                prep(RunEvent, "run", run_id, connection),
                kind,
                prep(RunEvent, "payload", payload, connection),
            ]
        return _ask(connection, sql, params, _first_number)
    with _cursor(connection) as cursor:
        cursor.execute(
            f"INSERT INTO {sequences} AS q (trace_id, last_seq) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (trace_id) DO UPDATE SET last_seq = q.last_seq + EXCLUDED.last_seq "
            "RETURNING last_seq",
            [trace, count],
        )
        (last,) = cursor.fetchone()
    first = last - count + 1
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
            for index, (run_id, kind, payload) in enumerate(rows)
        ],
    )
    return Later.known(first)


def _first_number(cursor: Any) -> int:
    return min(row[0] for row in cursor.fetchall())


def cancel_flag(run_id: str) -> bool:
    """Whether a cancel was asked of the run (False for no such run)."""
    connection = connections[DEFAULT_DB_ALIAS]
    table = quote(Run._meta.db_table)
    with _cursor(connection) as cursor:
        query = f"SELECT cancel_requested FROM {table} WHERE id = %s"  # noqa: S608
        cursor.execute(query, [run_id_param(run_id, connection)])
        row = cursor.fetchone()
    return bool(row and row[0])


def lock_status(run_id: str) -> str | None:
    """Lock a run's row until commit (PostgreSQL; SQLite has one writer) and read its status."""
    connection = connections[DEFAULT_DB_ALIAS]
    table = quote(Run._meta.db_table)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with _cursor(connection) as cursor:
        query = f"SELECT status FROM {table} WHERE id = %s{lock}"  # noqa: S608
        cursor.execute(query, [run_id_param(run_id, connection)])
        row = cursor.fetchone()
    return None if row is None else row[0]


def group_unfinished(parent_id: str, spawn_group: str, terminal: Iterable[str]) -> bool:
    """Whether a child of the spawn group has not ended. A statement of its own, after the
    parent's lock: under READ COMMITTED it sees what siblings committed while it waited."""
    connection = connections[DEFAULT_DB_ALIAS]
    terminal = [str(s) for s in terminal]
    table = quote(Run._meta.db_table)
    sql = (
        f"SELECT 1 FROM {table} WHERE parent_id = %s AND spawn_group = %s "  # noqa: S608
        f"AND status NOT IN ({marks(terminal)}) LIMIT 1"
    )
    with _cursor(connection) as cursor:
        cursor.execute(sql, [run_id_param(parent_id, connection), spawn_group, *terminal])
        return cursor.fetchone() is not None


def release(run_id: str, owner: str) -> None:
    connection = connections[DEFAULT_DB_ALIAS]
    table = quote(Run._meta.db_table)
    _send(
        connection,
        f"UPDATE {table} SET lease_owner = '', lease_expires_at = NULL "  # noqa: S608
        "WHERE id = %s AND lease_owner = %s",
        [run_id_param(run_id, connection), owner],
    )


# The tables whose plans matter to the engine's statements, and the least size (in pages) at
# which growth is looked at: an empty table is planned as if it had ten.
_ANALYZED = (Run, StepRun, RunEvent, TraceSequence, LLMCall, ToolCall)
_GROWN_PAGES = 10


def analyze(*, grown_only: bool, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Fresh planner statistics for the runs tables (PostgreSQL; elsewhere nothing): all of
    them, or, `grown_only`, those at least twice the size they had when last analysed
    (pages, as the server counts them now and as its statistics say), so that a run of
    growth costs a few ANALYZEs, each of a sample of the table. Answers the tables analysed.

    PostgreSQL plans a prepared statement again when its tables' statistics change; with
    none (autovacuum off, or not yet run), a plan made on a nearly empty run table reads it
    whole, for as long as the connection lives. After migrations (runs/apps.py) and from the
    sweeper, which is what the engine relies on instead of its own re-preparing."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    tables = [model._meta.db_table for model in _ANALYZED]
    with connection.cursor() as cursor:
        if grown_only:
            cursor.execute(
                "SELECT relname FROM pg_class WHERE oid = ANY(%s::regclass[]) "
                "AND pg_relation_size(oid) / current_setting('block_size')::int "
                ">= GREATEST(2 * relpages, %s) ORDER BY relname",
                [tables, _GROWN_PAGES],
            )
            tables = [name for (name,) in cursor.fetchall()]
        if tables:
            cursor.execute(f"ANALYZE {', '.join(connection.ops.quote_name(t) for t in tables)}")
    return tables
