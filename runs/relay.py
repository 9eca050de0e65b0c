"""The live relay: live pages across processes in the embedded default, without Redis.

The in-memory channel layer reaches only the sockets of the process that sends. A run started
by `manage.py run_entity`, or a request decided from another process, would never show in the
open trace page or inbox of the server (`make run`). So the server process runs one thread
that reads, every HIERARCH_LIVE_RELAY["POLL_SECONDS"], what other processes wrote and hands it
to its own layer:

- a trace's events from RunEvent, which every run writes anyway with the trace's next numbers
  (in the order they commit), for the traces this server has a socket on (`TraceHub`); the
  numbers this process sent itself are left out (`runs.events.sent_here_take`);
- the other broadcasts (the inbox's) from the Broadcast table, which `broadcast_on_commit`
  fills in the writer's transaction; the rows of this process are left out (their `origin`).

Delivery stays what the layer promises, at most once, and the readers already make good what
is missed: a trace socket that sees a gap in the numbers re-reads the database; an inbox push
re-renders the whole list. With Redis the relay is off: that layer reaches every process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import reduce
from operator import or_

from django.conf import settings
from django.db import connections
from django.db.models import Max, Q
from django.utils import timezone

from runs.consumers import TraceHub
from runs.events import PROCESS, broadcast, broadcasts_prune, sent_here_follow, sent_here_take
from runs.models import Broadcast, RunEvent

log = logging.getLogger(__name__)

BATCH = 1000  # rows read per table per poll; the rest comes at the next
TRACES_PER_QUERY = 100
# On PostgreSQL ids are taken at insert and rows commit in any order: an id skipped over
# (a transaction still open, or rolled back) is looked for again for this long; at most this
# many below an id read (more writers than that at the same moment is not the embedded case).
GAP_SECONDS = 10.0
LARGEST_GAP = 100
PRUNE_SECONDS = 30.0


class Relay:
    """What one server process has relayed so far. `send(group, message)` hands a message to
    the process's layer; `watched()` names the traces it has sockets on; `clock` is monotonic
    seconds (injected, so tests control time)."""

    def __init__(
        self,
        *,
        send: Callable[[str, dict], None],
        watched: Callable[[], frozenset[str]],
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = timezone.now,
    ) -> None:
        self.send = send
        self.watched = watched
        self.clock = clock
        self.now = now
        self.after: int | None = None  # the last broadcast id read
        self.gaps: dict[int, float] = {}  # ids below `after` not seen yet, since when
        self.traces: dict[str, int] = {}  # a watched trace's last event number relayed
        self.pruned_at: float | None = None

    def poll(self) -> int:
        """Relay what other processes wrote since the last poll; answers how many messages."""
        sent = self._broadcasts() + self._trace_events()
        if self.pruned_at is None or self.clock() - self.pruned_at >= PRUNE_SECONDS:
            self.pruned_at = self.clock()
            broadcasts_prune(self.now())
        return sent

    def _broadcasts(self) -> int:
        if self.after is None:  # a server that starts relays nothing from before it
            self.after = Broadcast.objects.aggregate(last=Max("pk"))["last"] or 0
            return 0
        rows = (
            Broadcast.objects.filter(Q(pk__gt=self.after) | Q(pk__in=list(self.gaps)))
            .order_by("pk")
            .values_list("pk", "group", "message", "origin")[:BATCH]
        )
        now, sent = self.clock(), 0
        for pk, group, message, origin in rows:
            self.gaps.pop(pk, None)
            if pk > self.after:
                for missing in range(max(self.after + 1, pk - LARGEST_GAP), pk):
                    self.gaps[missing] = now
                self.after = pk
            if origin != PROCESS:
                self.send(group, message)
                sent += 1
        for pk, since in list(self.gaps.items()):
            if now - since > GAP_SECONDS:
                del self.gaps[pk]
        return sent

    def _trace_events(self) -> int:
        watched = self.watched()
        sent_here_follow(watched)
        for gone in set(self.traces) - watched:
            del self.traces[gone]
        sent = 0
        for trace_id in sorted(watched - set(self.traces)):
            sent += self._start_following(trace_id)
        following = sorted((t, seq) for t, seq in self.traces.items())
        for start in range(0, len(following), TRACES_PER_QUERY):
            chunk = following[start : start + TRACES_PER_QUERY]
            newer = reduce(or_, (Q(trace_id=t, seq__gt=seq) for t, seq in chunk))
            rows = (
                RunEvent.objects.filter(newer)
                .order_by("trace_id", "seq")
                .values_list("trace_id", "seq", "run_id", "type", "payload")[:BATCH]
            )
            by_trace: dict[str, list[dict]] = {}
            for trace, seq, run_id, kind, payload in rows:
                by_trace.setdefault(str(trace), []).append(
                    {"seq": seq, "run_id": str(run_id), "type": kind, "payload": payload}
                )
            for trace_id, events in by_trace.items():
                last = events[-1]["seq"]
                self.traces[trace_id] = last
                mine = sent_here_take(trace_id, last)
                theirs = [event for event in events if event["seq"] not in mine]
                if theirs:
                    self.send(f"trace_{trace_id}", {"type": "run.events", "events": theirs})
                    sent += 1
        return sent

    def _start_following(self, trace_id: str) -> int:
        """Follow a trace a socket opened on, from its last event. That event is sent once:
        a socket that read the trace before an event of another process committed sees the
        gap and re-reads it; one that has it drops it (a socket sends each number once)."""
        last = (
            RunEvent.objects.filter(trace_id=trace_id)
            .order_by("-seq")
            .values_list("seq", "run_id", "type", "payload")
            .first()
        )
        self.traces[trace_id] = last[0] if last else 0
        if last is None:
            return 0
        seq, run_id, kind, payload = last
        event = {"seq": seq, "run_id": str(run_id), "type": kind, "payload": payload}
        self.send(f"trace_{trace_id}", {"type": "run.events", "events": [event]})
        return 1


_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def start_live_relay() -> None:
    """In the server process, when HIERARCH_LIVE_RELAY["ENABLED"] (no Redis): relay in a
    daemon thread, every POLL_SECONDS, for as long as the process lives."""
    global _thread
    with _thread_lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_relay_forever, name="hierarch-relay", daemon=True)
        _thread.start()


def _relay_forever() -> None:
    relay = Relay(send=broadcast, watched=TraceHub.watched_traces)
    pause = threading.Event()
    while True:
        try:
            relay.poll()
        except Exception:
            log.exception("relaying live events from other processes failed")
        finally:
            # Back to the pool (PostgreSQL) between polls: the relay holds no connection idle.
            connections.close_all()
        pause.wait(settings.HIERARCH_LIVE_RELAY["POLL_SECONDS"])
