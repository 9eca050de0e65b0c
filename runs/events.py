"""A trace's events: appended with the trace's next sequence numbers in the writer's
transaction, and handed to the channel layer after commit (at most once: a reader that misses
one re-reads the trace from the database after its last number). One module for every writer
(the run store, the run services) and for the inbox broadcasts of approvals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from runs import sql
from runs.models import Broadcast

log = logging.getLogger(__name__)

# This process, as the live relay's broadcast rows name it (runs/relay.py).
PROCESS = uuid.uuid4().hex


def append_events(trace_id: str, run_id: str, items: list[tuple[str, dict]]) -> None:
    """Append events with the trace's next sequence numbers; send them after commit."""
    append_event_rows(trace_id, [(run_id, kind, payload) for kind, payload in items])


def append_event_rows(trace_id: str, rows: list[tuple[str, str, dict]]) -> None:
    """`append_events` for the events of several runs of a trace, each `(run_id, type,
    payload)`: one statement."""
    if not rows:
        return
    first = sql.append_rows(trace_id, rows, timezone.now())

    def sent() -> None:  # the numbers are in by then, even from a pipeline
        _broadcast(
            str(trace_id),
            [
                {"seq": first.value() + i, "run_id": str(run_id), "type": kind, "payload": payload}
                for i, (run_id, kind, payload) in enumerate(rows)
            ],
        )

    sql.on_commit(sent)


def broadcast_on_commit(group: str, message: dict) -> None:
    """Hand `message` to `group` once the current transaction commits. With the live relay on
    (no Redis), also record it in that transaction, so that the server process hears a change
    made in another one (`manage.py run_entity`, a worker) and a change rolled back is heard
    by no one."""
    if settings.HIERARCH_LIVE_RELAY["ENABLED"]:
        now = timezone.now()
        Broadcast.objects.create(group=group, message=message, origin=PROCESS, created_at=now)
        if now.timestamp() - _PRUNED_AT[0] >= PRUNE_SECONDS:
            _PRUNED_AT[0] = now.timestamp()
            # After the commit: a delete inside the caller's transaction could wait on another
            # writer's, for rows nobody needs any more.
            transaction.on_commit(lambda: _prune_quietly(now))
    transaction.on_commit(lambda: broadcast(group, message))


PRUNE_SECONDS = 30.0
_PRUNED_AT = [0.0]  # when this process last deleted old broadcast rows (epoch seconds)


def broadcasts_prune(now: datetime) -> int:
    """Delete the broadcast rows older than HIERARCH_LIVE_RELAY["KEEP_SECONDS"]: every process
    that writes them prunes now and then, so the table stays small with or without a server
    reading it."""
    keep = timedelta(seconds=settings.HIERARCH_LIVE_RELAY["KEEP_SECONDS"])
    deleted, _ = Broadcast.objects.filter(created_at__lt=now - keep).delete()
    return deleted


def _prune_quietly(now: datetime) -> None:
    try:
        broadcasts_prune(now)
    except DatabaseError:  # the next writer or the relay prunes instead
        log.warning("pruning the live relay's broadcasts failed", exc_info=True)


# The traces the live relay follows (runs/relay.py), each with the event numbers this process
# handed to its own layer since: the relay reads every new event of the trace from the
# database and must not send these a second time.
_SENT_HERE: dict[str, set[int]] = {}
_SENT_HERE_LOCK = threading.Lock()


def sent_here_follow(trace_ids: Iterable[str]) -> None:
    """Note the numbers this process sends for exactly these traces from now on."""
    wanted = set(trace_ids)
    with _SENT_HERE_LOCK:
        for gone in set(_SENT_HERE) - wanted:
            del _SENT_HERE[gone]
        for trace_id in wanted:
            _SENT_HERE.setdefault(trace_id, set())


def sent_here_take(trace_id: str, upto: int) -> set[int]:
    """The numbers up to `upto` this process sent for a followed trace; forgotten once taken."""
    with _SENT_HERE_LOCK:
        sent = _SENT_HERE.get(trace_id)
        if not sent:
            return set()
        taken = {seq for seq in sent if seq <= upto}
        sent -= taken
        return taken


def broadcast(group: str, message: dict) -> None:
    """Hand one message to a channel-layer group without waiting (at most once)."""
    sender = _sender()
    if sender is None:
        return
    loop, layer = sender
    asyncio.run_coroutine_threadsafe(_send(layer, group, message), loop)


# Events waiting for a sender's loop, by trace: the commits of a busy run come faster than
# one message each is worth (waking the loop, a group_send, every socket's write), so what
# arrives while a send is pending joins it, one message per trace. Kept per sender: events
# for the server's loop must never join a send pending on the process's own sender loop
# (the in-memory layer wakes a consumer only from the consumer's loop).
_WAITING: dict[asyncio.AbstractEventLoop, dict[str, list[dict]]] = {}
_ARMED: dict[asyncio.AbstractEventLoop, float] = {}  # when each loop's send was asked for
_WAITING_LOCK = threading.Lock()
GATHER_SECONDS = 0.02  # how long a send waits for more of the same burst


def _broadcast(trace_id: str, events: list[dict]) -> None:
    """Hand the events to the channel layer without waiting: delivery is at most once, and a
    reader that misses one re-reads the trace from the database after its last number."""
    if _SENT_HERE:
        with _SENT_HERE_LOCK:
            followed = _SENT_HERE.get(trace_id)
            if followed is not None:
                followed.update(event["seq"] for event in events)
    sender = _sender()
    if sender is None:
        return
    loop, layer = sender
    now = time.monotonic()
    with _WAITING_LOCK:
        waiting = _WAITING.setdefault(loop, {})
        # A send is on its way and takes these too, unless its loop has gone (closed) since.
        pending = bool(waiting) and now - _ARMED.get(loop, 0.0) < 1.0
        waiting.setdefault(trace_id, []).extend(events)
        if not pending:
            _ARMED[loop] = now
        for gone in [other for other in _WAITING if other.is_closed()]:
            del _WAITING[gone]
            _ARMED.pop(gone, None)
    if not pending:
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: the next one sends
            loop.call_soon_threadsafe(loop.call_later, GATHER_SECONDS, _send_waiting, layer)


def _send_waiting(layer: Any) -> None:
    """On the sender's loop: one message per trace with every event waiting for it."""
    loop = asyncio.get_running_loop()
    with _WAITING_LOCK:
        waiting = _WAITING.pop(loop, {})
    for trace_id, events in waiting.items():
        message = {"type": "run.events", "events": events}
        asyncio.ensure_future(_send(layer, f"trace_{trace_id}", message))


_SERVER_LOOP: asyncio.AbstractEventLoop | None = None


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The ASGI server's event loop (config/asgi.py records it on the first connection).
    The in-memory channel layer (the embedded default) wakes a consumer only when the
    message is put on the consumer's own loop, so its sends go there."""
    global _SERVER_LOOP
    _SERVER_LOOP = loop


async def _send(layer: Any, group: str, message: dict) -> None:
    with contextlib.suppress(Exception):  # a full or absent layer must not break a run
        await layer.group_send(group, message)


_SENDER: tuple[asyncio.AbstractEventLoop, Any] | None = None
_SENDER_LOCK = threading.Lock()


def _sender() -> tuple[asyncio.AbstractEventLoop, Any] | None:
    """One event loop thread per process for channel-layer sends (async_to_sync per event
    cost about a millisecond)."""
    global _SENDER
    server = _SERVER_LOOP
    if server is not None and not server.is_closed():
        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            return server, layer
    if _SENDER is not None:
        return _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            layer = get_channel_layer()
            if layer is None:
                return None
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="hierarch-events", daemon=True).start()
            _SENDER = (loop, layer)
    return _SENDER
