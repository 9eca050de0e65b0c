"""The live trace's websocket: `/ws/runs/<trace_id>/?after=<seq>` streams a trace's RunEvents
in order, each once.

Authenticated by the session (AuthMiddlewareStack) and origin-checked (config/asgi.py); an
anonymous visitor, or one who cannot see the trace's root run (another workspace's trace, or
none), is refused before the handshake completes. It listens to `trace_<trace_id>`, where
`runs/store.py` sends each committed batch of events, then replays from the database what
came after `after` (the last number the page has), then forwards the live batches.

One subscription per trace per server process (`TraceHub`) receives the group's batches and
hands them to each socket's queue: fifty watchers of one trace cost one channel-layer message
per batch, not fifty (each a round trip to Redis). A socket's queue is its buffer: the live
batches that arrive during its replay wait there and are handled after it; anything at or
below the last number sent is dropped. The channel layer delivers at most once and batches
from different workers may cross: a batch that starts past the next number means an earlier
one is late or lost, and since a trace's events commit in the order of their numbers, the gap
is read from the database at once. The client so sees every number once, in order.

The user's right to see the trace is checked again before a send when the last check is older
than RECHECK_SECONDS: a role taken away closes the socket (4403).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any, Literal, TypedDict
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model

from runs.models import RunEvent
from runs.selectors import run_list

NOT_SIGNED_IN = 4401
ACCESS_LOST = 4403
NOT_FOUND = 4404  # no such trace, or another workspace's (never told apart)
BAD_REQUEST = 4400
log = logging.getLogger(__name__)
REPLAY_BATCH = 500
RECHECK_SECONDS = 5.0
# An event number as the column holds it (PositiveBigIntegerField), in ASCII digits only:
# `str.isdigit()` also takes "²" or "٣", which `int()` then refuses.
EVENT_NUMBER = re.compile(r"[0-9]{1,19}")
LARGEST_EVENT_NUMBER = 2**63 - 1
# The one message a client sends is a ping of a few bytes; a longer one is not parsed at all
# (json.loads of a deeply nested text raises RecursionError).
LONGEST_MESSAGE = 1024


class BadParameter(ValueError):
    """A query parameter the socket does not take; the message names it, for the client."""


def socket_after(scope: dict[str, Any]) -> int:
    """The `after` of the socket's query string (0 when absent), or BadParameter naming what
    is wrong: the only parameter there is, once, an event number of 0 or more."""
    try:
        params = parse_qs(
            scope.get("query_string", b"").decode("ascii"),
            keep_blank_values=True,
            strict_parsing=False,
            errors="strict",
            max_num_fields=10,
        )
    except (UnicodeError, ValueError):
        raise BadParameter(
            "the query string is not valid; it takes ?after=<event number>"
        ) from None
    unknown = sorted(set(params) - {"after"})
    if unknown:
        raise BadParameter(f"{unknown[0][:40]!r}: unknown parameter; the one taken is after")
    values = params.get("after", ["0"])
    if len(values) != 1:
        raise BadParameter("after: given more than once")
    raw = values[0]
    if not EVENT_NUMBER.fullmatch(raw) or int(raw) > LARGEST_EVENT_NUMBER:
        raise BadParameter(f"after: {raw[:40]!r} is not an event number (0 or more)")
    return int(raw)


class Event(TypedDict):
    seq: int
    run_id: str
    type: str
    payload: dict


class RunEvents(TypedDict):
    """What `runs.events._broadcast` sends to `trace_<trace_id>`, and what this socket sends."""

    type: Literal["run.events"]
    events: list[Event]


def trace_visible(user_id: int, trace_id: str) -> bool:
    """Whether the user, read afresh (permissions are cached per user object), may see the
    trace's root run."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and run_list(user=user).filter(pk=trace_id).exists()


def events_after(trace_id: str, after: int, limit: int = REPLAY_BATCH) -> list[Event]:
    rows = (
        RunEvent.objects.filter(trace_id=trace_id, seq__gt=after)
        .order_by("seq")
        .values_list("seq", "run_id", "type", "payload")[:limit]
    )
    return [
        {"seq": seq, "run_id": str(run_id), "type": kind, "payload": payload}
        for seq, run_id, kind, payload in rows
    ]


class Batch:
    """One live batch as every socket of the process gets it, serialised once."""

    def __init__(self, message: RunEvents) -> None:
        self.events = sorted(message.get("events", []), key=lambda e: e["seq"])
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = json.dumps({"type": "run.events", "events": self.events})
        return self._text


class TraceHub:
    """The process's one subscription to a trace's group, shared by its sockets."""

    _hubs: dict[str, TraceHub] = {}
    # The keys of _hubs as of the last change, replaced whole: the live relay's thread
    # (runs/relay.py) reads it while the server's loop changes _hubs.
    _watched: frozenset[str] = frozenset()

    @classmethod
    def watched_traces(cls) -> frozenset[str]:
        """The traces this process holds a subscription for (one per trace with a socket);
        safe to call from any thread."""
        return cls._watched

    @classmethod
    def _note_watched(cls) -> None:
        cls._watched = frozenset(cls._hubs)

    def __init__(self, layer: Any, trace_id: str) -> None:
        self.layer = layer
        self.trace_id = trace_id
        self.group = f"trace_{trace_id}"
        self.loop = asyncio.get_running_loop()
        self.queues: set[asyncio.Queue] = set()
        self.joined = asyncio.Event()
        self.task: asyncio.Task | None = None

    @classmethod
    async def join(cls, layer: Any, trace_id: str, queue: asyncio.Queue) -> TraceHub:
        """The trace's hub with `queue` added: made (and subscribed) by the first socket.
        Whatever interrupts the joining, the queue is not left behind in the registry."""
        hub = cls._hubs.get(trace_id)
        if hub is None or hub.loop is not asyncio.get_running_loop() or hub.layer is not layer:
            hub = cls._hubs[trace_id] = cls(layer, trace_id)
            hub.queues.add(queue)
            try:
                hub.channel = await layer.new_channel()
                await layer.group_add(hub.group, hub.channel)
            except BaseException:
                hub.queues.clear()
                if cls._hubs.get(trace_id) is hub:
                    del cls._hubs[trace_id]
                cls._note_watched()
                hub.joined.set()  # the sockets waiting on it see it failed and give up
                raise
            hub.task = asyncio.ensure_future(hub.pump())
            hub.joined.set()
            cls._note_watched()  # subscribed: what the relay sends from now on is heard
        else:
            hub.queues.add(queue)
            try:
                await hub.joined.wait()
            except BaseException:
                await hub.leave(queue)
                raise
            if hub.task is None:
                hub.queues.discard(queue)
                raise ConnectionError(f"subscribing to the events of trace {trace_id} failed")
        return hub

    async def leave(self, queue: asyncio.Queue) -> None:
        self.queues.discard(queue)
        if self.queues or self._hubs.get(self.trace_id) is not self:
            return
        del self._hubs[self.trace_id]
        self._note_watched()
        if self.task is not None:
            self.task.cancel()
        if self.joined.is_set():
            await self.layer.group_discard(self.group, self.channel)

    async def pump(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # a layer that hiccups: the sockets' gap checks repair it
                log.warning("receiving the events of trace %s failed", self.trace_id, exc_info=True)
                await asyncio.sleep(0.05)
                continue
            if message.get("type") != "run.events":
                continue
            batch = Batch(message)
            for queue in list(self.queues):
                queue.put_nowait(batch)


class TraceConsumer(AsyncWebsocketConsumer):
    # No channel of its own: the process's hub receives for every socket of a trace (a
    # channel each would be one more receive loop on the layer per socket, for nothing).
    channel_layer_alias = "trace sockets have no channel of their own"

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_SIGNED_IN)
            return
        self.user_id = user.pk
        self.trace_id = str(self.scope["url_route"]["kwargs"]["trace_id"])
        if not await database_sync_to_async(trace_visible)(self.user_id, self.trace_id):
            await self.close(code=NOT_FOUND)
            return
        self.checked_at = time.monotonic()
        self.last_sent = 0
        self.stopped = False
        # Every parameter is checked before anything is held: a bad one is refused without
        # joining the trace's subscription. The handshake is completed only so that the
        # client reads why (a browser gets no close code nor message from a refused one).
        try:
            after = socket_after(self.scope)
        except BadParameter as bad:
            await self.accept()
            await self._error(str(bad))
            await self.close(code=BAD_REQUEST)
            return
        # Listen before the replay reads: an event committed from now on is either in the
        # replay's reads or in a live batch (or both; the duplicate is dropped).
        self.queue: asyncio.Queue[Batch] = asyncio.Queue()
        self.hub = await TraceHub.join(get_channel_layer(), self.trace_id, self.queue)
        try:
            await self.accept()
            self.last_sent = after
            await self.catch_up()
            await self.send(text_data=json.dumps({"type": "live", "last_seq": self.last_sent}))
            self.forwarding = asyncio.ensure_future(self.forward())
        except BaseException:
            # Channels calls no disconnect() when connect() raises: the subscription is let
            # go here, or the process would queue the trace's events for no one, forever.
            await self._leave()
            raise

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _leave(self) -> None:
        forwarding, self.forwarding = getattr(self, "forwarding", None), None
        hub, self.hub = getattr(self, "hub", None), None
        try:
            if forwarding is not None:
                forwarding.cancel()
        finally:
            if hub is not None:
                await hub.leave(self.queue)

    async def forward(self) -> None:
        """The live batches, one at a time, in the order they came."""
        while not self.stopped:
            batch = await self.queue.get()
            try:
                await self.run_events(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("forwarding the events of trace %s failed", self.trace_id)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The socket only streams; a client may ping. Anything else gets a clear error."""
        message = None
        if text_data is not None and len(text_data) <= LONGEST_MESSAGE:
            with contextlib.suppress(ValueError):
                message = json.loads(text_data)
        if isinstance(message, dict) and message.get("type") == "ping":
            await self.send(text_data=json.dumps({"type": "pong", "last_seq": self.last_sent}))
            return
        await self._error(
            'This socket only streams the trace\'s events; the one message it takes is {"type": '
            '"ping"}. To catch up, reconnect with ?after=<the last event number you have>.'
        )

    async def run_events(self, batch: Batch) -> None:
        events = [e for e in batch.events if e["seq"] > self.last_sent]
        if self.stopped or not events or not await self._still_allowed():
            return
        if events[0]["seq"] != self.last_sent + 1:
            # An earlier batch is late or lost; it has committed (numbers commit in order).
            await self.catch_up()
            events = [e for e in events if e["seq"] > self.last_sent]
        if len(events) == len(batch.events):  # the usual case: the batch as it came
            await self.send(text_data=batch.text)
            self.last_sent = events[-1]["seq"]
        elif events:
            await self._send_events(events)

    async def catch_up(self) -> None:
        """Send what the database has after the last number sent, in batches, until none."""
        while True:
            events = await database_sync_to_async(events_after)(self.trace_id, self.last_sent)
            if events:
                await self._send_events(events)
            if len(events) < REPLAY_BATCH:
                return

    async def _send_events(self, events: list[Event]) -> None:
        await self.send(text_data=json.dumps({"type": "run.events", "events": events}))
        self.last_sent = events[-1]["seq"]

    async def _still_allowed(self) -> bool:
        if time.monotonic() - self.checked_at < RECHECK_SECONDS:
            return True
        if await database_sync_to_async(trace_visible)(self.user_id, self.trace_id):
            self.checked_at = time.monotonic()
            return True
        self.stopped = True
        await self._error("You can no longer see this trace.")
        await self.close(code=ACCESS_LOST)
        return False

    async def _error(self, text: str) -> None:
        await self.send(text_data=json.dumps({"type": "error", "message": text}))
