"""The live trace's websocket: who may connect, the replay after a sequence number, live
events in order and once, and what a client that sends nonsense gets."""

from __future__ import annotations

import json

import pytest
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.test import Client

from config.middleware import RememberLoop
from config.routing import websocket_urlpatterns
from entities.models import Membership
from governance.permissions import membership_revoke
from runs import consumers
from runs.models import RunEvent, TraceSequence
from runs.store import append_events
from tests.factories import EntityFactory, paused_run

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True), pytest.mark.smoke]

TIMEOUT = 3


def routed():
    """The routes as config/asgi.py serves them, with the user put in the scope by the test."""
    return RememberLoop(URLRouter(websocket_urlpatterns))


def served():
    """The whole websocket stack of config/asgi.py: origin check, session, routes."""
    return RememberLoop(
        AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
    )


@pytest.fixture
def trace(acme):
    return paused_run(EntityFactory(workspace=acme, name="researcher"))


async def connect(user, trace_id, query: str = "") -> tuple[WebsocketCommunicator, bool, int]:
    communicator = WebsocketCommunicator(routed(), f"/ws/runs/{trace_id}/{query}")
    communicator.scope["user"] = user
    accepted, code = await communicator.connect()
    return communicator, accepted, code


async def watching(user, trace_id, after: int = 0) -> WebsocketCommunicator:
    communicator, accepted, _ = await connect(user, trace_id, f"?after={after}")
    assert accepted
    return communicator


@database_sync_to_async
def emit(run, *types: str) -> None:
    """Events appended as the engine appends them: numbered, sent after commit."""
    with transaction.atomic():
        append_events(str(run.trace_id), str(run.pk), [(kind, {"n": kind}) for kind in types])


@database_sync_to_async
def emit_silently(run, *types: str) -> list[int]:
    """Events committed whose message the channel layer lost (it delivers at most once)."""
    with transaction.atomic():
        sequence, _ = TraceSequence.objects.select_for_update().get_or_create(trace_id=run.trace_id)
        numbers = []
        for kind in types:
            sequence.last_seq += 1
            RunEvent.objects.create(
                trace_id=run.trace_id, seq=sequence.last_seq, run=run, type=kind, payload={}
            )
            numbers.append(sequence.last_seq)
        sequence.save()
    return numbers


async def frame(communicator: WebsocketCommunicator) -> dict:
    return json.loads(await communicator.receive_from(TIMEOUT))


async def seqs(communicator: WebsocketCommunicator) -> list[int]:
    message = await frame(communicator)
    assert message["type"] == "run.events", message
    return [event["seq"] for event in message["events"]]


async def test_it_refuses_an_anonymous_visitor(trace):
    _, accepted, code = await connect(AnonymousUser(), trace.trace_id)
    assert not accepted and code == consumers.NOT_SIGNED_IN


async def test_it_refuses_a_trace_of_another_workspace_and_one_that_does_not_exist(
    charlie, alice, trace
):
    import uuid

    _, accepted, code = await connect(charlie, trace.trace_id)
    assert not accepted and code == consumers.NOT_FOUND
    _, accepted, code = await connect(alice, uuid.uuid4())
    assert not accepted and code == consumers.NOT_FOUND


async def test_it_replays_what_came_after_the_pages_number_then_forwards_new_events(bob, trace):
    await emit(trace, "run.status", "step.started", "step.finished")
    page = await watching(bob, trace.trace_id, after=1)
    replay = await frame(page)
    assert [e["seq"] for e in replay["events"]] == [2, 3]
    assert replay["events"][0] == {
        "seq": 2,
        "run_id": str(trace.pk),
        "type": "step.started",
        "payload": {"n": "step.started"},
    }
    assert await frame(page) == {"type": "live", "last_seq": 3}
    await emit(trace, "llm.call", "tool.call")
    assert await seqs(page) == [4, 5]
    await page.disconnect()


async def test_a_page_with_everything_gets_no_replay(bob, trace):
    await emit(trace, "run.status")
    page = await watching(bob, trace.trace_id, after=1)
    assert await frame(page) == {"type": "live", "last_seq": 1}
    assert await page.receive_nothing(timeout=0.2)
    await page.disconnect()


async def test_it_sends_each_number_once_and_in_order_filling_gaps_from_the_database(bob, trace):
    await emit(trace, "run.status", "step.started")
    page = await watching(bob, trace.trace_id, after=0)
    assert await seqs(page) == [1, 2]
    assert (await frame(page))["type"] == "live"
    layer = get_channel_layer()
    group = f"trace_{trace.trace_id}"

    def batch(*numbers: int) -> dict:
        return {
            "type": "run.events",
            "events": [
                {"seq": n, "run_id": str(trace.pk), "type": "x", "payload": {}} for n in numbers
            ],
        }

    # Two batches committed whose messages were lost, then one that arrives.
    await emit_silently(trace, "step.finished", "llm.call")
    await emit(trace, "tool.call")
    assert await seqs(page) == [3, 4, 5]  # 3 and 4 read from the database
    # The lost ones turn up late, and a duplicate: nothing is sent twice.
    await layer.group_send(group, batch(3, 4))
    await layer.group_send(group, batch(5))
    assert await page.receive_nothing(timeout=0.3)
    await emit(trace, "run.status")
    assert await seqs(page) == [6]
    await page.disconnect()


async def test_a_message_that_is_not_a_ping_gets_an_error_and_the_stream_goes_on(bob, trace):
    page = await watching(bob, trace.trace_id)
    assert (await frame(page))["type"] == "live"
    for nonsense in ("not json", '{"type": "subscribe", "trace": "all"}', "[1, 2]"):
        await page.send_to(text_data=nonsense)
        answer = await frame(page)
        assert answer["type"] == "error"
        assert '{"type": "ping"}' in answer["message"]
    await page.send_to(bytes_data=b"\x00\x01")
    assert (await frame(page))["type"] == "error"
    await page.send_to(text_data='{"type": "ping"}')
    assert await frame(page) == {"type": "pong", "last_seq": 0}
    await emit(trace, "run.status")
    assert await seqs(page) == [1]
    await page.disconnect()


async def test_an_after_that_is_not_a_number_is_named_and_the_socket_closed(bob, trace):
    page, accepted, _ = await connect(bob, trace.trace_id, "?after=last")
    assert accepted
    answer = await frame(page)
    assert answer == {
        "type": "error",
        "message": "after: 'last' is not an event number (0 or more)",
    }
    closed = await page.receive_output(TIMEOUT)
    assert closed == {"type": "websocket.close", "code": consumers.BAD_REQUEST}


@pytest.mark.parametrize(
    "query",
    [
        "?after=%C2%B2",  # "²": str.isdigit() says yes, int() says no
        "?after=%D9%A3",  # an Arabic-Indic three
        "?after=-1",
        "?after=+1",
        "?after=%201",
        "?after=1e3",
        "?after=",
        "?after=%00",
        "?after=99999999999999999999",  # past what the column holds
        "?after=1&after=2",
        "?after=1&trace=all",
        "?after=%FF",
    ],
)
async def test_a_bad_query_parameter_closes_the_socket_cleanly_and_holds_no_subscription(
    bob, trace, query, caplog
):
    page, accepted, _ = await connect(bob, trace.trace_id, query)
    assert accepted  # only so the client reads why
    answer = await frame(page)
    assert answer["type"] == "error" and answer["message"], answer
    assert await page.receive_output(TIMEOUT) == {
        "type": "websocket.close",
        "code": consumers.BAD_REQUEST,
    }
    await page.wait(TIMEOUT)
    assert consumers.TraceHub.watched_traces() == set()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL") or r.exc_info]


async def test_a_closed_socket_lets_its_subscription_go(bob, trace):
    page = await watching(bob, trace.trace_id)
    assert (await frame(page))["type"] == "live"
    assert consumers.TraceHub.watched_traces() == {str(trace.trace_id)}
    await page.disconnect()
    assert consumers.TraceHub.watched_traces() == set()


async def test_a_long_or_deeply_nested_message_gets_an_error_and_the_stream_goes_on(bob, trace):
    page = await watching(bob, trace.trace_id)
    assert (await frame(page))["type"] == "live"
    for nonsense in ("[" * 100_000, '{"type": "ping", "pad": "' + "x" * 5000 + '"}'):
        await page.send_to(text_data=nonsense)
        assert (await frame(page))["type"] == "error"
    await page.send_to(text_data='{"type": "ping"}')
    assert await frame(page) == {"type": "pong", "last_seq": 0}
    await page.disconnect()
    assert consumers.TraceHub.watched_traces() == set()


async def test_a_role_taken_away_stops_the_stream(bob, acme, trace, monkeypatch):
    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0)
    page = await watching(bob, trace.trace_id)
    assert (await frame(page))["type"] == "live"
    await emit(trace, "run.status")
    assert await seqs(page) == [1]
    membership = await Membership.objects.aget(user=bob, workspace=acme)
    await database_sync_to_async(membership_revoke)(membership=membership)
    await emit(trace, "step.started")
    assert await frame(page) == {"type": "error", "message": "You can no longer see this trace."}
    assert await page.receive_output(TIMEOUT) == {
        "type": "websocket.close",
        "code": consumers.ACCESS_LOST,
    }


async def test_it_reads_the_session_through_the_asgi_stack_and_checks_the_origin(bob, trace):
    client = Client()
    await database_sync_to_async(client.force_login)(bob)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    path = f"/ws/runs/{trace.trace_id}/?after=0"
    ours = WebsocketCommunicator(
        served(), path, headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)]
    )
    accepted, _ = await ours.connect()
    assert accepted
    assert (await frame(ours))["type"] == "live"
    await ours.disconnect()
    theirs = WebsocketCommunicator(
        served(), path, headers=[(b"origin", b"http://evil.example"), (b"cookie", cookie)]
    )
    accepted, _ = await theirs.connect()
    assert not accepted
