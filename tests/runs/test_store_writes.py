"""The store's writes sent whole (runs/sql.py `one_trip`): a transaction whose statements go in
psycopg's pipeline on PostgreSQL. These tests commit for real (transaction=True): inside a
test's own transaction the store writes statement by statement instead, which the other run
tests cover.
"""

from __future__ import annotations

import gc
import weakref
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from psycopg.pq import TransactionStatus

from runs import executors, services, sql
from runs.engine.core import ChildRequest, Events, LeaseLost, StepRecord
from runs.engine.ports import ModelCall, ModelReply, ModelRequest, Save, Spawn
from runs.engine.state import EVENT_KINDS
from runs.models import LLMCall, Run, RunEvent, StepRun
from runs.services import run_start
from runs.store import OrmRunStore, _Heartbeat
from tests.factories import EntityFactory, WorkspaceFactory
from tests.marks import postgresql_only
from tests.support.queued_runs import Driver
from tests.support.runs import io
from tools.models import RecordedRow

pytestmark = [
    pytest.mark.django_db(transaction=True),
    postgresql_only(
        "PostgreSQL only: these test its writes sent together in one round trip; on SQLite "
        "every write is an ordinary transaction, which the other run tests cover (CI runs "
        "this file on PostgreSQL)",
    ),
]


@pytest.fixture
def acme():
    return WorkspaceFactory(name="Acme", slug="acme")


@pytest.fixture(autouse=True)
def hints(monkeypatch):
    """The hints runs send to an executor, kept here: these transactions commit, so a run
    started here would also be advanced by the inline executor's threads, beside the test."""
    sent: list[str] = []
    monkeypatch.setattr(services, "enqueue", sent.append)
    monkeypatch.setattr(executors, "enqueue", sent.append)
    monkeypatch.setattr(executors, "enqueue_at", lambda run_id, delay_s: sent.append(run_id))
    return sent


@pytest.fixture(autouse=True)
def leases():
    """The runs a test claims by hand: their leases' heartbeat stops with the test (it would
    write on its own connection while the tables are emptied)."""
    held: list = []
    yield held
    for view in held:
        _Heartbeat.stop(view)


def row(workspace, key: str) -> dict:  # noqa: ANN001
    return {
        "workspace": workspace.pk,
        "run_id": "",
        "idempotency_key": key,
        "table": "t",
        "data": {"key": key},
        "created_at": timezone.now(),
    }


def a_step(key: str = "s1") -> StepRecord:
    return StepRecord(
        key=key, position=1, name="Step", type="THOUGHT", status="COMPLETED", iteration=1
    )


def loaded(acme, leases) -> tuple[OrmRunStore, object]:  # noqa: ANN001
    entity = EntityFactory(workspace=acme, name="solo", io_contract=io(None, answer="string"))
    run = run_start(entity=entity, input_data={})
    store = OrmRunStore()
    view = store.claim(str(run.pk))
    leases.append(view)
    return store, view


def test_outside_a_transaction_the_writes_go_whole_and_inside_one_they_do_not():
    with sql.one_trip() as whole:
        assert whole is True
    with transaction.atomic(), sql.one_trip() as whole:
        assert whole is False  # a test's own transaction, or a caller's
    with sql.one_trip(careful=True) as whole:
        assert whole is False


def test_a_hierarchy_written_whole_runs_to_the_end_with_every_record(acme):
    for name in ("left", "right"):
        EntityFactory(workspace=acme, name=name, io_contract=io(None, **{name: "string"}))
    EntityFactory(
        workspace=acme,
        name="first",
        io_contract=io({"topic": "string"}, draft="string"),
    )
    parent = EntityFactory(
        workspace=acme,
        name="parent",
        type="AGENT",
        children=[
            "first",
            {"child_id": "left", "relationship": "PARALLEL"},
            {"child_id": "right", "relationship": "PARALLEL"},
        ],
        io_contract=io({"topic": "string"}, left="string", right="string"),
    )
    run = Driver().run(parent, {"topic": "hiring"})

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    children = Run.objects.filter(parent=run)
    assert sorted(children.values_list("status", flat=True)) == ["COMPLETED"] * 3
    assert LLMCall.objects.filter(run__trace_id=run.trace_id).count() == 3
    seqs = list(
        RunEvent.objects.filter(trace_id=run.trace_id).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))  # numbered without a gap
    kinds = set(RunEvent.objects.filter(trace_id=run.trace_id).values_list("type", flat=True))
    assert {"run.created", "llm.call", "run.status"} <= kinds <= EVENT_KINDS
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE


def test_a_closed_connection_is_freed_with_what_the_writes_prepared_on_it(acme):
    """Executors may close a worker's connection between steps; nothing the writes did on it
    (the statements psycopg prepared for them, their cursors) may keep it alive, or a
    long-lived worker keeps every connection it ever opened in memory."""
    EntityFactory(workspace=acme, name="solo", io_contract=io(None, answer="string"))
    top = EntityFactory(workspace=acme, name="top", type="SKILL", children=["solo"])
    # The first connection of a process may be kept by what psycopg and Django set up once on
    # their first use; every later one must go.
    for _ in range(2):
        for _ in range(3):  # psycopg prepares a statement once it ran a few times
            run = Driver().run(top, {})
            assert run.status == "COMPLETED", (run.error_code, run.error_message)
        assert prepared_count(), "the writes prepared nothing on this connection"
        gone = weakref.ref(connection.connection)
        connection.close()
        # A pooled connection goes back to the pool on close (DB_POOL_MAX_SIZE), which keeps it
        # on purpose: the pool letting go of it is when nothing else may hold it.
        connection.close_pool()
        gc.collect()
    assert gone() is None, "a closed connection is still in memory"


def prepared_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return cursor.fetchone()[0]


def test_a_write_whose_lease_was_taken_keeps_nothing(acme, leases):
    store, view = loaded(acme, leases)
    Run.objects.filter(pk=view.id).update(lease_owner="another-worker")
    before = RunEvent.objects.filter(trace_id=view.trace_id).count()
    events = Events()
    events.add("step.started", step="Step")

    with pytest.raises(LeaseLost, match="held by another worker"):
        store.commit(view, Save([a_step()], events))

    assert RunEvent.objects.filter(trace_id=view.trace_id).count() == before
    assert not StepRun.objects.filter(run_id=view.id).exists()
    assert Run.objects.get(pk=view.id).lease_owner == "another-worker"
    # The connection is usable at once: the server ended the aborted transaction.
    assert Run.objects.filter(pk=view.id).exists()


def test_the_same_lease_check_holds_statement_by_statement_inside_a_transaction(acme, leases):
    store, view = loaded(acme, leases)
    Run.objects.filter(pk=view.id).update(lease_owner="another-worker")
    with pytest.raises(LeaseLost), transaction.atomic():
        store.commit(view, Save([a_step()], Events()))
    assert not StepRun.objects.filter(run_id=view.id).exists()


def test_a_model_call_recorded_by_another_worker_first_keeps_nothing_of_this_one(acme, leases):
    store, view = loaded(acme, leases)
    request = ModelRequest(
        provider="local", model="offline", messages=({"role": "user", "content": "hi"},)
    )
    reply = ModelReply(
        content="hello",
        prompt_tokens=3,
        completion_tokens=2,
        cost_usd=Decimal(0),
        latency_ms=1,
        provider="local",
        model="offline",
    )
    store.record(view, ModelCall(a_step(), "call-1", request, reply))
    events = RunEvent.objects.filter(trace_id=view.trace_id).count()
    tokens = Run.objects.get(pk=view.id).total_tokens

    with pytest.raises(LeaseLost, match="recorded call-1"):
        store.record(view, ModelCall(a_step(), "call-1", request, reply))

    assert LLMCall.objects.filter(run_id=view.id).count() == 1
    assert RunEvent.objects.filter(trace_id=view.trace_id).count() == events
    assert Run.objects.get(pk=view.id).total_tokens == tokens == 5


def test_a_failing_statement_rolls_the_whole_write_back_and_leaves_the_connection_idle(acme):
    with pytest.raises(IntegrityError), sql.one_trip():
        sql.insert(RecordedRow, [row(acme, "once")])
        sql.insert(RecordedRow, [row(acme, "once")])  # the same key again
    assert not RecordedRow.objects.exists()
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE


def test_the_error_raised_is_the_servers_for_a_statement_in_the_middle_of_the_write(acme):
    """The statements after a failed one are not run: the server's error is what is raised
    (a unique key's conflict, a lost lease), and nothing of the write is kept."""
    with pytest.raises(IntegrityError, match="duplicate key"), sql.one_trip() as whole:
        assert whole
        sql.insert(RecordedRow, [row(acme, "once")])
        sql.insert(RecordedRow, [row(acme, "once")])
        sql.insert(RecordedRow, [row(acme, "after")])
    assert not RecordedRow.objects.exists()
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE


def test_a_read_inside_the_block_opens_the_transaction_the_rest_goes_in(acme):
    """An answer wanted before the block's end: what is queued is sent inside a transaction
    of Django's, which the rest of the block joins and which commits at the end."""
    with pytest.raises(ValueError, match="changed my mind"), sql.one_trip():
        sql.insert(RecordedRow, [row(acme, "first")])
        assert RecordedRow.objects.count() == 1  # the ORM's read sees the queued insert
        assert connection.in_atomic_block
        raise ValueError("changed my mind")
    assert not RecordedRow.objects.exists()

    with sql.one_trip():
        sql.insert(RecordedRow, [row(acme, "first")])
        assert RecordedRow.objects.count() == 1
        sql.insert(RecordedRow, [row(acme, "second")])
    assert RecordedRow.objects.count() == 2
    assert not connection.in_atomic_block


def test_an_exception_inside_the_block_rolls_it_back_and_skips_the_commit_hooks(acme):
    ran: list[str] = []
    with pytest.raises(ValueError, match="changed my mind"), sql.one_trip():
        sql.insert(RecordedRow, [row(acme, "first")])
        sql.on_commit(lambda: ran.append("rolled back"))
        raise ValueError("changed my mind")
    assert not RecordedRow.objects.exists()
    assert ran == []

    with sql.one_trip():
        sql.insert(RecordedRow, [row(acme, "second")])
        sql.on_commit(lambda: ran.append(f"after commit: {RecordedRow.objects.count()} row"))
    assert ran == ["after commit: 1 row"]


def test_children_spawned_after_a_cancel_the_worker_has_not_seen_start_cancelled(acme, leases):
    EntityFactory(workspace=acme, name="child", io_contract=io(None, answer="string"))
    parent = EntityFactory(
        workspace=acme,
        name="parent",
        type="AGENT",
        children=["child"],
        io_contract=io(None, answer="string"),
    )
    run = run_start(entity=parent, input_data={})
    store = OrmRunStore()
    view = store.claim(str(run.pk))
    leases.append(view)
    # A person cancels between this worker's claim and its spawn.
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    view = view.changed(status="WAITING")

    done = store.commit(
        view,
        Spawn([ChildRequest(step_key="s1", group_index=0, entity_ref="child", input={})]),
    )
    (child_id,) = done.child_ids

    assert Run.objects.get(pk=child_id).cancel_requested is True
    assert done.run.cancel_requested is True  # read back from the write, after the commit
