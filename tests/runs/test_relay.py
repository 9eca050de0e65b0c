"""The live relay of the embedded default (runs/relay.py): the server hears what other
processes broadcast, each message once, and not what it sent itself; the broadcast table stays
small, holds only the broadcast, and is not written with Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.services import INBOX_GROUP, broadcast_inbox
from runs import events
from runs.models import Broadcast, RunEvent, TraceSequence
from runs.relay import GAP_SECONDS, Relay
from runs.store import append_events
from tests.factories import EntityFactory, approval_request, paused_run

pytestmark = pytest.mark.django_db

ON = {"ENABLED": True, "POLL_SECONDS": 0.25, "KEEP_SECONDS": 60}
OFF = {**ON, "ENABLED": False}
OTHER = "f" * 32  # another process's origin


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """A relay as a server process holds one, with the messages it handed to its layer."""

    def __init__(self, watched: set[str] | None = None) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.watching = set(watched or ())
        self.clock = Clock()
        self.relay = Relay(
            send=lambda group, message: self.sent.append((group, message)),
            watched=lambda: frozenset(self.watching),
            clock=self.clock,
        )

    def poll(self) -> list[tuple[str, dict]]:
        self.sent.clear()
        self.relay.poll()
        return list(self.sent)


def written_elsewhere(group: str, n: int) -> Broadcast:
    return Broadcast.objects.create(
        group=group, message={"type": "approval.changed", "n": n}, origin=OTHER,
        created_at=timezone.now(),
    )  # fmt: skip


def committed_elsewhere(run, *types: str) -> list[int]:
    """Events another process committed: in the table, never on this process's layer."""
    with transaction.atomic():
        sequence, _ = TraceSequence.objects.select_for_update().get_or_create(trace_id=run.trace_id)
        numbers = []
        for kind in types:
            sequence.last_seq += 1
            RunEvent.objects.create(
                trace_id=run.trace_id, seq=sequence.last_seq, run=run, type=kind, payload={}
            )
            numbers.append(sequence.last_seq)
        sequence.save(update_fields=["last_seq"])
    return numbers


@pytest.fixture(autouse=True)
def _follow_nothing_after():
    yield
    events.sent_here_follow(())  # the process's relay state, as no test left it


@pytest.fixture
def run(acme):
    return paused_run(EntityFactory(workspace=acme, name="researcher"))


def test_it_relays_another_process_broadcasts_and_not_its_own(acme):
    server = Server()
    written_elsewhere("inbox_1", 0)  # before the server started: not replayed
    assert server.poll() == []
    written_elsewhere("inbox_1", 1)
    Broadcast.objects.create(
        group="inbox_1", message={"n": 2}, origin=events.PROCESS, created_at=timezone.now()
    )
    written_elsewhere("inbox_2", 3)
    assert server.poll() == [
        ("inbox_1", {"type": "approval.changed", "n": 1}),
        ("inbox_2", {"type": "approval.changed", "n": 3}),
    ]
    assert server.poll() == []


def test_a_broadcast_that_commits_after_a_later_one_is_still_relayed_once(acme):
    # PostgreSQL hands out ids at insert: id 2 may commit after id 3 was read.
    server = Server()
    server.poll()
    first, late, third = (written_elsewhere("inbox_1", n) for n in (1, 2, 3))
    late_id = late.pk
    late.delete()  # not committed yet, as the relay sees it
    assert [m["n"] for _, m in server.poll()] == [1, 3]
    written = written_elsewhere("inbox_1", 2)
    Broadcast.objects.filter(pk=written.pk).update(id=late_id)
    assert [m["n"] for _, m in server.poll()] == [2]
    assert server.poll() == []


def test_an_id_that_never_commits_is_given_up_after_a_while(acme):
    server = Server()
    server.poll()
    first, rolled_back, third = (written_elsewhere("inbox_1", n) for n in (1, 2, 3))
    rolled_back_id = rolled_back.pk
    rolled_back.delete()
    server.poll()
    assert rolled_back_id in server.relay.gaps
    server.clock.now += GAP_SECONDS + 1
    server.poll()
    assert server.relay.gaps == {}


def test_it_relays_the_events_another_process_commits_to_a_watched_trace(run):
    trace = str(run.trace_id)
    committed_elsewhere(run, "run.started")
    server = Server(watched={trace})
    # A socket just opened: the trace's last event, so a socket that read the trace before
    # an event of another process committed sees the gap and re-reads.
    assert server.poll() == [
        (f"trace_{trace}", {"type": "run.events", "events": [event(run, 1, "run.started")]})
    ]
    assert server.poll() == []
    committed_elsewhere(run, "step.started", "step.finished")
    assert server.poll() == [
        (
            f"trace_{trace}",
            {
                "type": "run.events",
                "events": [event(run, 2, "step.started"), event(run, 3, "step.finished")],
            },
        )
    ]
    assert server.poll() == []


def test_it_leaves_out_the_events_this_process_sent_itself(run, django_capture_on_commit_callbacks):
    trace = str(run.trace_id)
    server = Server(watched={trace})
    server.poll()
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        append_events(trace, str(run.pk), [("step.started", {}), ("step.finished", {})])
    committed_elsewhere(run, "run.completed")
    assert server.poll() == [
        (f"trace_{trace}", {"type": "run.events", "events": [event(run, 3, "run.completed")]})
    ]


def test_a_trace_nobody_watches_any_more_is_let_go(run):
    server = Server(watched={str(run.trace_id)})
    server.poll()
    server.watching.clear()
    committed_elsewhere(run, "step.started")
    assert server.poll() == []
    assert server.relay.traces == {}


def test_old_broadcast_rows_are_deleted_by_the_relay(acme):
    server = Server()
    old = written_elsewhere("inbox_1", 1)
    Broadcast.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    fresh = written_elsewhere("inbox_1", 2)
    server.poll()
    assert list(Broadcast.objects.values_list("pk", flat=True)) == [fresh.pk]


def test_an_inbox_change_is_recorded_for_other_processes_with_only_the_broadcast(
    run, settings, django_capture_on_commit_callbacks, monkeypatch
):
    settings.HIERARCH_LIVE_RELAY = ON
    monkeypatch.setattr(events, "_PRUNED_AT", [0.0])  # this process prunes on its next write
    stale = written_elsewhere("inbox_1", 0)
    Broadcast.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(hours=1))
    approval = approval_request(run)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        broadcast_inbox(approval)
    row = Broadcast.objects.get()
    assert (row.group, row.origin) == (
        INBOX_GROUP.format(workspace_id=run.workspace_id),
        events.PROCESS,
    )
    assert row.message == {
        "type": "approval.changed",
        "approval_id": approval.pk,
        "workspace_id": run.workspace_id,
        "status": "PENDING",
    }


def test_a_change_rolled_back_leaves_no_broadcast(run, settings):
    settings.HIERARCH_LIVE_RELAY = ON
    approval = approval_request(run)
    with pytest.raises(RuntimeError), transaction.atomic():
        broadcast_inbox(approval)
        raise RuntimeError("rolled back")
    assert not Broadcast.objects.exists()


def test_with_redis_nothing_is_written(run, settings):
    settings.HIERARCH_LIVE_RELAY = OFF
    with transaction.atomic():
        broadcast_inbox(approval_request(run))
    assert not Broadcast.objects.exists()


def event(run, seq: int, kind: str) -> dict:
    return {"seq": seq, "run_id": str(run.pk), "type": kind, "payload": {}}
