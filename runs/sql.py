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
import dataclasses
import functools
import itertools
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from select import select as _wait_for
from typing import Any

import psycopg
import psycopg.adapt
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from psycopg import pq

from runs.models import Run, RunEvent, TraceSequence

# Each function takes the thread's connection once (`connections[DEFAULT_DB_ALIAS]`):
# `django.db.connection` is a proxy that looks it up again on every attribute, and these run
# for every statement of every step.


@contextlib.contextmanager
def _cursor(connection: Any = None) -> Iterator[Any]:
    """A cursor for these statements, closed after the block (see `_open_cursor`); errors
    in the block are Django's."""
    connection = connection or connections[DEFAULT_DB_ALIAS]
    cursor = _open_cursor(connection)
    try:
        with connection.wrap_database_errors:
            yield cursor
    finally:
        _done(cursor)


def _open_cursor(connection: Any) -> Any:
    """A cursor for these statements. On PostgreSQL it binds parameters on the server and
    prepares each statement on first use (one plan per connection and statement text):
    planning a statement on the run table costs more than running it. Django's own cursors
    bind on the client and never prepare, so connection poolers keep working for the rest;
    these run inside the worker's own connection.

    While Django logs statements (DEBUG, a test capturing queries) or someone wrapped them
    (`connection.execute_wrapper`: tracing, counting), the cursor is Django's wrapper around
    it, so these statements are logged and wrapped like any other. Else it is psycopg's own
    (Django's wrapper costs more than the statement's own Python); the callers turn its
    errors into Django's (`_cursor`, `_ask`, `one_trip`)."""
    if connection.vendor != "postgresql" or not settings.HIERARCH_ENGINE.get(
        "PREPARE_STATEMENTS", True
    ):
        return connection.cursor()
    batch = getattr(_batching, "batch", None)
    if batch is not None and batch.connection is connection:
        return batch.cursor()  # inside `one_trip`: kept for the batch
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off; let these statements (prepare=True) prepare, and
        # nothing else: Django's client-binding cursors never prepare.
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    state = _connection_state(raw)
    state.executed += 1
    if state.executed >= state.replan_after:
        _replan(raw, state)
    if connection.queries_logged or connection.execute_wrappers:
        return connection._prepare_cursor(_PreparingCursor(raw))
    connection.validate_no_broken_transaction()  # as Django's wrapper would
    # psycopg's cursors keep what they learnt (how to send each type of value, how to read
    # each column): reused, a statement costs a quarter less than on a new cursor.
    idle = getattr(raw, _IDLE, None)
    if idle:
        return idle.pop()
    if idle is None:
        setattr(raw, _IDLE, [])
    return _PreparingCursor(raw)


def _done(cursor: Any) -> None:
    """Give back a cursor of `_open_cursor` once its answer is read (or not wanted): psycopg's
    own to its connection's idle cursors (its next statement resets it), any other closed.
    In a pipeline the answer of a statement whose cursor went back arrives on it later and is
    replaced by the next one's: only statements whose answer nobody reads give theirs back
    before the pipeline's sync (`_ask` keeps its cursor until `Later.value`)."""
    if type(cursor) is _PreparingCursor and not cursor.closed:
        idle = getattr(cursor.connection, _IDLE, None)
        if idle is not None and len(idle) < _IDLE_CURSORS:
            idle.append(cursor)
            return
    cursor.close()


# Each connection's idle cursors, kept on the connection (Django's connections are per
# thread), so they go with it: a cursor refers to its connection, so in a process-wide weak
# dictionary they would keep every connection the process ever opened alive.
_IDLE = "_hierarch_idle_cursors"
_IDLE_CURSORS = 16
_ONLY_WHEN_ASKED = 2**31 - 1


class _PreparingCursor(psycopg.Cursor):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("prepare", True)
        return super().execute(query, params, **kwargs)


_batching = threading.local()  # Django's connections are per thread, and so are these


class _Batch:
    """One transaction's statements in libpq's pipeline mode (see `one_trip`).

    psycopg's pipeline polls the socket after each statement to send it and read what came
    back: most of what a statement costs the worker. Here each statement (prepared on its
    first use on the connection) is handed to libpq, which sends what the socket takes at
    once, so the server works on it while the worker builds the next; answers are read only
    when needed (a read inside the block, any other statement on the connection, the
    block's end), after a sync, all together. A failed statement fails the rest (the server
    aborts the transaction) and is raised as psycopg's error for it.

    Values are dumped by psycopg's own Transformer with the connection's adapters (Django's
    among them), and rows loaded the same way: what its cursors would send and answer."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.raw = connection.connection
        self.pgconn = self.raw.pgconn
        self.sent: list[_BatchCursor | str] = []  # what answers are awaited, in order
        self.preparing: dict[tuple[str, tuple], str] = {}
        self.begun = False
        self.state = _connection_state(self.raw)
        self.prepared, self.transformer = self.state.prepared, self.state.transformer
        if self.state.executed >= self.state.replan_after:
            _replan(self.raw, self.state)

    def cursor(self) -> _BatchCursor:
        return _BatchCursor(self)

    def send(self, statement: _BatchCursor) -> None:
        pg = self.pgconn
        self._open()
        # Prepared for the values' types, as psycopg keys its own statements.
        key = (statement.sql, statement.types)
        name = self.prepared.get(key) or self.preparing.get(key)
        if name is None:
            name = f"_hr_{next(_names)}"  # never one the connection may have
            pg.send_prepare(name.encode(), statement.query, param_types=statement.types)
            self.preparing[key] = name
            self.sent.append(name)
        pg.send_query_prepared(name.encode(), statement.params, param_formats=statement.formats)
        self.sent.append(statement)
        self.state.executed += 1
        pg.flush()  # what the socket takes now; the rest goes with the sync

    def _open(self) -> None:
        pg = self.pgconn
        if not pg.pipeline_status:
            pg.enter_pipeline_mode()
        if not self.begun:
            pg.send_query_params(b"BEGIN", None)
            self.sent.append("BEGIN")
            self.begun = True

    def abandon(self) -> None:
        """After the block raised: what was sent, synced and its answers dropped (the
        transaction is rolled back after)."""
        pg = self.pgconn
        sent, self.sent = self.sent, []
        preparing, self.preparing = self.preparing, {}
        if pg.pipeline_status:
            try:
                pg.pipeline_sync()
                answers = _sync(pg)
            finally:
                pg.exit_pipeline_mode()
            self._prepared(sent, answers, preparing)

    def _prepared(
        self,
        sent: list[_BatchCursor | str],
        answers: list[list[Any]],
        preparing: dict[tuple[str, tuple], str],
    ) -> None:
        """Keep the statements prepared: on the connection whatever the transaction does."""
        done = {
            waiting
            for waiting, results in zip(sent, answers, strict=False)
            if isinstance(waiting, str) and results[-1].status == pq.ExecStatus.COMMAND_OK
        }
        self.prepared.update((key, name) for key, name in preparing.items() if name in done)

    def flush(self, *, commit: bool = False) -> None:
        """Sync (with COMMIT first when `commit`) and read every answer awaited; raise the
        first failure."""
        pg = self.pgconn
        if commit:
            self._open()
            pg.send_query_params(b"COMMIT", None)
            self.sent.append("COMMIT")
        if not self.sent:
            return
        sent, self.sent = self.sent, []
        preparing, self.preparing = self.preparing, {}
        try:
            pg.pipeline_sync()
            answers = _sync(pg)
        finally:
            if pg.pipeline_status:
                pg.exit_pipeline_mode()
        failure = None
        for waiting, results in zip(sent, answers, strict=False):
            result = results[-1]
            status = result.status
            if status == pq.ExecStatus.FATAL_ERROR:
                if failure is None:
                    failure = psycopg.errors.error_from_result(result, encoding=pg._encoding)
            elif status == pq.ExecStatus.PIPELINE_ABORTED:
                continue
            elif isinstance(waiting, _BatchCursor):
                waiting.answer(result)
        self._prepared(sent, answers, preparing)
        if failure is not None:
            raise failure


class _BatchCursor:
    """A statement of a `_Batch`, answering like a cursor once the batch is sent."""

    __slots__ = ("_rows", "batch", "formats", "params", "query", "rowcount", "sql", "types")

    def __init__(self, batch: _Batch) -> None:
        self.batch = batch
        self._rows: list[tuple] | None = None
        self.rowcount = -1

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        tx = self.batch.transformer
        self.sql = sql
        self.query = _numbered(sql)
        self.params = tx.dump_sequence(params, [_AUTO] * len(params))
        self.types, self.formats = tx.types, tx.formats
        self.batch.send(self)

    def answer(self, result: Any) -> None:
        tx = self.batch.transformer
        tx.set_pgresult(result)
        self._rows = tx.load_rows(0, result.ntuples, tuple) if result.ntuples else []
        self.rowcount = result.command_tuples if result.command_tuples is not None else -1

    def _answered(self) -> list[tuple]:
        if self._rows is None:
            self.batch.flush()
        return self._rows or []

    def fetchall(self) -> list[tuple]:
        return self._answered()

    def fetchone(self) -> tuple | None:
        rows = self._answered()
        return rows[0] if rows else None

    def close(self) -> None:
        pass


def _sync(pg: Any) -> list[list[Any]]:
    """Send what libpq holds and read every query's results up to the pipeline's sync
    (psycopg's loop, with the waits in `select`, which lets go of the GIL)."""
    answers: list[list[Any]] = []
    current: list[Any] = []
    socket = pg.socket
    while pg.flush():  # reading meanwhile: a server blocked on its answers takes no more
        readable, _, _ = _wait_for([socket], [socket], [])
        if readable:
            pg.consume_input()
    while True:
        while pg.is_busy():
            _wait_for([socket], [], [])
            pg.consume_input()
        result = pg.get_result()
        if result is None:
            if current:
                answers.append(current)
                current = []
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return answers
        current.append(result)


@functools.lru_cache(maxsize=512)
def _numbered(sql: str) -> bytes:
    """`%s` placeholders as PostgreSQL's `$1, $2, …` (these statements use no other `%`)."""
    parts = sql.split("%s")
    return "".join(
        part + (f"${index}" if index < len(parts) else "")
        for index, part in enumerate(parts, start=1)
    ).encode()


class _State:
    """What this module keeps per connection: the statements it prepared on it ((text,
    types) → name), a Transformer that keeps the dumpers and loaders it found, and how
    many statements it ran since it last had the connection's statements planned anew.

    Kept on the connection object itself, so it goes when the connection goes. (In a
    process-wide weak dictionary it never would: the Transformer refers to its connection,
    so each entry's value would keep its own key alive, and every connection a worker ever
    opened would stay in memory.)"""

    __slots__ = ("executed", "prepared", "replan_after", "transformer")

    def __init__(self, raw: Any) -> None:
        self.prepared: dict[tuple[str, tuple], str] = {}
        self.transformer = psycopg.adapt.Transformer(raw)
        self.executed = 0
        self.replan_after = _REPLAN_FIRST


def _connection_state(raw: Any) -> _State:
    state = getattr(raw, _STATE, None)
    if state is None:
        state = _State(raw)
        setattr(raw, _STATE, state)
        _forget_with_psycopg(raw, state.prepared)
    return state  # type: ignore[no-any-return]


def _forget_with_psycopg(raw: Any, prepared: dict) -> None:
    """Forget this module's statements whenever psycopg deallocates its own.

    psycopg deallocates every statement of its connection (DEALLOCATE ALL) when it sees a
    rollback while it holds statements of its own (those of `_PreparingCursor`): ours go
    with them on the server, so the batches must prepare theirs again, or their next
    transaction fails on a statement that no longer exists."""
    manager = raw._prepared
    clear = manager.clear

    def clear_both() -> bool:
        if clear():  # a DEALLOCATE ALL is on its way
            prepared.clear()
            return True
        return False

    manager.clear = clear_both


def _replan(raw: Any, state: _State) -> None:
    """Deallocate the connection's statements, to be prepared (and planned) again.

    PostgreSQL plans a prepared statement once for all its executions (after its first
    five) and keeps that plan until the tables' statistics change. On a new database,
    with no statistics yet (autovacuum off, or not yet run), a plan made while the run
    table was nearly empty reads it whole, for as long as the connection lives: the
    counters' update of a run and its ancestors did, and over bench/engine.py's first five
    runs on a new database the database's time per node grew from 1.8 ms to 4.7 ms. So
    the statements are planned anew after 1,000 statements, then after twice as many each
    time, up to every 64,000: a plan made when a table had n rows is remade by the time it
    has about 2n, for a few milliseconds of planning each time. Only between statements,
    never inside a pipeline or a failed transaction."""
    pg = raw.pgconn
    between = pg.transaction_status in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)
    if raw._pipeline is not None or pg.pipeline_status or not between:
        return
    state.executed = 0
    state.replan_after = min(state.replan_after * 2, _REPLAN_MOST)
    state.prepared.clear()
    raw._prepared.clear()  # psycopg's own: they go too
    raw._prepared._to_flush.clear()
    _command(raw, b"DEALLOCATE ALL")


_STATE = "_hierarch_batch_state"
_REPLAN_FIRST = 1_000
_REPLAN_MOST = 64_000
_AUTO = psycopg.adapt.PyFormat.AUTO
_names = itertools.count()

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

    On PostgreSQL, outside any other transaction (and unless `careful`), BEGIN, the block's
    statements and COMMIT go in one pipeline: statements are queued, not waited for, and the
    block's end waits once for all the answers. A step's write is four or five statements:
    one round trip instead of six or seven is most of what the database costs the engine.
    Statements answer through `Later`, read after the block (reading one inside it waits for
    the answers so far: correct, one more round trip). The answers come after the COMMIT, so
    whatever must stop the transaction is checked by the database itself (the fenced writes
    call hierarch_lease_lost()); an error of any statement aborts it on the server and is
    raised at the block's end as Django's error, and an exception of the block's own rolls
    it back. Hooks given to `on_commit` run after the commit. The block must not use the
    ORM's transactions (Django believes the connection idle).

    Elsewhere, with `careful` (the block needs answers before it commits, or the ORM's
    row locks), or when the setting HIERARCH_ENGINE["PIPELINE"] is off: `atomic()`."""
    connection = connections[DEFAULT_DB_ALIAS]
    if (
        careful
        or connection.vendor != "postgresql"
        or connection.in_atomic_block
        or getattr(_batching, "active", False)
        or not settings.HIERARCH_ENGINE.get("PIPELINE", True)
    ):
        with transaction.atomic():
            yield False
        return
    connection.ensure_connection()
    raw = connection.connection
    hooks: list[Callable[[], None]] = []
    if not (
        connection.queries_logged or connection.execute_wrappers
    ) and settings.HIERARCH_ENGINE.get("PREPARE_STATEMENTS", True):
        with _batched(connection, raw, hooks):
            yield True
        for hook in hooks:
            hook()
        return
    _batching.active, _batching.hooks = True, hooks
    try:
        with connection.wrap_database_errors:
            try:
                with raw.pipeline() as pipeline:
                    _batching.pipeline = pipeline
                    _command(raw, b"BEGIN")
                    try:
                        yield True
                    except BaseException:
                        _command(raw, b"ROLLBACK")
                        raise
                    _command(raw, b"COMMIT")
            except psycopg.errors.PipelineAborted as exc:
                # psycopg may report the statements after the failed one, not the failure:
                # raise what the server said (a unique key's conflict, a lost lease).
                raise _first_failure(exc) from None
            finally:
                _batching.pipeline = None
                if raw.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    _command(raw, b"ROLLBACK")  # a statement failed: the server kept it open
    finally:
        _batching.active, _batching.hooks = False, None
    for hook in hooks:
        hook()


@contextlib.contextmanager
def _batched(connection: Any, raw: Any, hooks: list[Callable[[], None]]) -> Iterator[None]:
    """`one_trip`'s block as a `_Batch`: sent when an answer is read, before any statement
    of Django's on the connection, and with COMMIT at the block's end."""
    batch = _Batch(connection)
    _batching.active, _batching.hooks, _batching.batch = True, hooks, batch

    def flush_first(execute: Any, sql: Any, params: Any, many: Any, context: Any) -> Any:
        batch.flush()
        return execute(sql, params, many, context)

    try:
        with connection.wrap_database_errors:
            try:
                with connection.execute_wrapper(flush_first):
                    yield
                batch.flush(commit=True)
            except BaseException:
                batch.abandon()
                raise
            finally:
                if raw.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    _command(raw, b"ROLLBACK")  # the block raised, or a statement failed
    finally:
        _batching.active, _batching.hooks, _batching.batch = False, None, None


def _first_failure(exc: BaseException) -> BaseException:
    """The error that aborted a pipeline: the first of `exc`'s context that is not merely
    "pipeline aborted", or `exc` itself."""
    seen = exc
    while seen is not None:
        if isinstance(seen, psycopg.Error) and not isinstance(seen, psycopg.errors.PipelineAborted):
            return seen
        seen = seen.__context__
    return exc


def _command(raw: psycopg.Connection, command: bytes) -> None:
    """BEGIN, COMMIT or ROLLBACK: in a pipeline only queued, to go with the next statement or
    the sync. psycopg's own way of sending its transaction commands (a cursor per command
    costs a cursor and a round of the pipeline's send and poll); a cursor if it has none."""
    send = getattr(raw, "_exec_command", None)
    if send is None:
        with psycopg.Cursor(raw) as cursor:
            cursor.execute(command)
    else:
        raw.wait(send(command))


def on_commit(hook: Callable[[], None]) -> None:
    """Run `hook` after the commit of the transaction in progress (`one_trip`'s or Django's)."""
    hooks = getattr(_batching, "hooks", None)
    if hooks is not None:
        hooks.append(hook)
    else:
        transaction.on_commit(hook)


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
                    pipeline = getattr(_batching, "pipeline", None)
                    if pipeline is not None:  # asked inside the block: wait for the answers
                        pipeline.sync()
                    self._value = self._read(self._cursor)
            finally:
                _done(self._cursor)
        return self._value


def _ask(sql: str, params: list[Any], read: Callable[[Any], Any]) -> Later:
    """Execute a statement whose answer `read` takes from the cursor: at once, or after the
    pipeline's round trip inside `one_trip`."""
    connection = connections[DEFAULT_DB_ALIAS]
    cursor = _open_cursor(connection)
    try:
        with connection.wrap_database_errors:
            cursor.execute(sql, params)
            if not getattr(_batching, "active", False):
                try:
                    return Later.known(read(cursor))
                finally:
                    _done(cursor)
    except BaseException:
        _done(cursor)
        raise
    return Later(cursor, read, connection)  # given back once read


@functools.cache
def quote(name: str) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


def prep(model: type[models.Model], name: str, value: Any) -> Any:
    """A value as the model's field sends it to this connection's database."""
    return preparer(model, name)(value)


def preparer(model: type[models.Model], name: str) -> Callable[[Any], Any]:
    """`prep` for one field: the field's `get_db_prep_save` on this connection."""
    return _preparer(_vendor(), model, name)


@functools.cache
def _vendor() -> str:
    return connections[DEFAULT_DB_ALIAS].vendor


@functools.cache
def _preparer(vendor: str, model: type[models.Model], name: str) -> Callable[[Any], Any]:
    """On PostgreSQL, the values these statements send (str, int, bool, Decimal, aware
    datetime, UUID or its text, JSON) are prepared as `get_db_prep_save` prepares them,
    without its several calls per value (a step sends a hundred values); any other value
    goes through the field itself. tests/runs/test_sql_prep.py holds the two to the same
    answers for every field these statements write."""
    field = model._meta.get_field(name)

    def slow(value: Any) -> Any:
        return field.get_db_prep_save(value, connections[DEFAULT_DB_ALIAS])

    if vendor != "postgresql":
        return slow
    target = field.target_field if field.is_relation else field
    kind = target.get_internal_type()
    if kind in ("CharField", "TextField") and not field.is_relation:

        def fast(value: Any) -> Any:
            # A str subclass (a choices enum) is sent as it is, as CharField.to_python does.
            return value if value is None or isinstance(value, str) else slow(value)

    elif kind in _int_types():
        wrap = _int_types()[kind]

        def fast(value: Any) -> Any:
            if type(value) is int:
                return wrap(value)
            return None if value is None else slow(value)

    elif kind in ("AutoField", "BigAutoField", "SmallAutoField"):

        def fast(value: Any) -> Any:
            if type(value) is int:
                return value  # an auto key is sent as it is (validate_autopk_value)
            return None if value is None else slow(value)

    elif kind == "BooleanField":

        def fast(value: Any) -> Any:
            return value if type(value) is bool else slow(value)

    elif kind == "DecimalField":

        def fast(value: Any) -> Any:
            if value is None or (type(value) is Decimal and value.is_finite()):
                return value
            return slow(value)

    elif kind == "DateTimeField":

        def fast(value: Any) -> Any:
            if value is None or (type(value) is datetime and value.tzinfo is not None):
                return value
            return slow(value)

    elif kind == "FloatField":

        def fast(value: Any) -> Any:
            return value if value is None or type(value) is float else slow(value)

    elif kind == "UUIDField":

        def fast(value: Any) -> Any:
            if type(value) is uuid.UUID:
                return value
            if type(value) is str and value:
                with contextlib.suppress(ValueError):
                    return uuid.UUID(value)
            return None if value is None else slow(value)

    elif kind == "JSONField":
        from django.db.backends.postgresql.operations import get_json_dumps
        from django.db.backends.postgresql.psycopg_any import Jsonb

        dumps = get_json_dumps(field.encoder)

        def fast(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, models.Expression):
                return slow(value)
            return Jsonb(value, dumps=dumps)

    else:
        return slow
    return fast


@functools.cache
def _int_types() -> dict[str, Any]:
    """How Django's PostgreSQL backend wraps each integer field's values (psycopg 3)."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    return dict(getattr(DatabaseOperations, "integerfield_type_map", {}))


def run_id_param(value: Any) -> Any:
    return prep(Run, "id", value)


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
    return _ask(sql, params, functools.partial(_claimed, names=names))


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
    terms = _claim_terms(claim, owner)
    params = [owner, terms[0], run_id_param(run_id), *terms[1:]]
    if connection.vendor == "postgresql":
        sql = (
            f"WITH c AS ({sql}) SELECT 1 FROM c UNION ALL "  # noqa: S608
            "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM c) AND hierarch_claim_refused(%s)"
        )
        params.append(str(run_id))
    with _cursor(connection) as cursor_:
        cursor_.execute(sql, params)
        if connection.vendor != "postgresql" and cursor_.fetchone() is None:
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
    preps = _preparers(connection.vendor, Run, names)
    params = [
        *(prepare(values[n]) for n, prepare in zip(names, preps, strict=True)),
        run_id_param(run_id),
    ]
    if claim is not None:
        terms = _claim_terms(claim, owner)
        taken = {"lease_owner": owner, "lease_expires_at": terms[0]}
        params[len(names) : len(names)] = [taken[n] for n in _TAKEN if n not in names]
        params += [*terms[1:], str(run_id)]
        return _ask(sql, params, _cancel_flag)
    params.append(owner)
    if connection.vendor == "postgresql":
        params.append(str(run_id))
    return _ask(sql, params, _cancel_flag)


def _claim_terms(claim: Claim, owner: str) -> list[Any]:
    """The parameters of a claim's conditions: the lease's end, then the WHERE's after the
    run's id."""
    moment = prep(Run, "lease_expires_at", claim.now)
    return [
        prep(Run, "lease_expires_at", claim.until),
        "WAITING",
        prep(Run, "cursor", claim.cursor),
        prep(Run, "iteration", claim.iteration),
        prep(Run, "attempt", claim.attempt),
        prep(Run, "deadline_at", claim.deadline),
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
    if connection.vendor == "postgresql":
        params += [str(run_id), mine]
        if record is not None:
            sql = _with_record(record[0], sql)
            params = [*record[1], *params]
    elif record is not None:
        with _cursor(connection) as cursor:
            cursor.execute(*record)
    return _ask(sql, params, functools.partial(_counted, cost=cost))


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
    return _ask(sql, params, functools.partial(_changed, rows=len(ids)))


def _changed(cursor: Any, *, rows: int) -> bool:
    return cursor.rowcount == rows


def unreserve(anchor: str, amount: Decimal) -> None:
    """Give back what was set aside at a budget anchor."""
    with _cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd - %s "  # noqa: S608
            "WHERE id = %s",
            [prep(Run, "reserved_usd", amount), run_id_param(anchor)],
        )


def reserve_budget(anchor: str, amount: Decimal) -> Later:
    """Set a child's budget aside at its parent's anchor; False (`Later`; nothing written)
    when the anchor's budget has no room for it."""
    held = prep(Run, "reserved_usd", amount)
    return _ask(
        f"UPDATE {quote(Run._meta.db_table)} SET reserved_usd = reserved_usd + %s "  # noqa: S608
        "WHERE id = %s AND total_cost_usd + reserved_usd + %s <= budget_usd",
        [held, run_id_param(anchor), held],
        functools.partial(_changed, rows=1),
    )


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
    """INSERT rows (dicts of field names), optionally ON CONFLICT (...) DO UPDATE. A value
    may be `Computed`: the database works it out as the row goes in (the same expression for
    the column in every row)."""
    statement = insert_statement(model, rows, conflict=conflict, update=update)
    if statement is not None:
        with _cursor(connections[DEFAULT_DB_ALIAS]) as cursor:
            cursor.execute(*statement)


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
    preps = _preparers(connection.vendor, model, names)
    shape = tuple(v.sql if isinstance(v, Computed) else None for v in rows[0].values())
    sql = _insert_sql(
        connection.vendor, model, names, len(rows), tuple(conflict), tuple(update), shape
    )
    params: list[Any] = []
    for row in rows:
        for name, prepare in zip(names, preps, strict=True):
            value = row[name]
            if isinstance(value, Computed):
                params.extend(value.params)
            else:
                params.append(prepare(value))
    return sql, params


@dataclasses.dataclass(frozen=True)
class Computed:
    """A value the database computes as the row is inserted: an SQL expression and its
    parameters (for `insert`)."""

    sql: str
    params: tuple[Any, ...] = ()


@functools.cache
def _preparers(
    vendor: str, model: type[models.Model], names: tuple[str, ...]
) -> tuple[Callable[[Any], Any], ...]:
    return tuple(_preparer(vendor, model, name) for name in names)


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
    trace = prep(TraceSequence, "trace_id", trace_id)
    created = prep(RunEvent, "created_at", now)
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
                prep(RunEvent, "run", run_id),
                kind,
                prep(RunEvent, "payload", payload),
            ]
        return _ask(sql, params, _first_number)
    with _cursor() as cursor:
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
    table = quote(Run._meta.db_table)
    with _cursor() as cursor:
        query = f"SELECT cancel_requested FROM {table} WHERE id = %s"  # noqa: S608
        cursor.execute(query, [run_id_param(run_id)])
        row = cursor.fetchone()
    return bool(row and row[0])


def lock_status(run_id: str) -> str | None:
    """Lock a run's row until commit (PostgreSQL; SQLite has one writer) and read its status."""
    connection = connections[DEFAULT_DB_ALIAS]
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
