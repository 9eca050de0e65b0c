"""The engine's RunStore on the ORM: leases, step records, events and counters.

Each method is one short transaction. The database is the truth: a broker message or a
thread-pool task is only a hint to look, so `claim` answers None for a run that is finished,
waiting on a due time, or leased by someone else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, transaction
from django.db.models import Avg, BooleanField, Count, ExpressionWrapper, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from entities.models import Entity, EntityVersion
from governance.audit import audit_record
from governance.models import AuditAction
from governance.safety import SafetyScreening
from governance.vault import PiiCipher
from runs import sql
from runs.approval_desk import ApprovalDesk, ApprovalRequest, approval_desk
from runs.engine import hitl, pinned, ports
from runs.engine import state as payloads
from runs.engine.core import (
    ChildOutcome,
    ChildRequest,
    Events,
    LeaseLost,
    LimitReached,
    LimitRow,
    RunView,
    StepRecord,
    budget_blocks,
    child_step_key,
    first_limit_hit,
    lifetime_limit,
    lifetime_used,
    no_room_for_children,
    run_limits,
)
from runs.engine.hiring import fired_with, hired_fields
from runs.engine.limits import (
    QUOTA_HELD_KEY,
    hired_limits,
    month_start,
    quota_hold,
    quota_refused,
)
from runs.engine.limits import lifetime_left as core_lifetime_left
from runs.engine.observability import child_export_trace, events_kept
from runs.engine.pii_copies import PiiCopies
from runs.engine.ports import LIMIT_EXCEEDED, ModelReply, ModelRequest, ToolResult
from runs.engine.state import take_pending
from runs.engine.storage import DispatchingStore
from runs.engine.tree import descendants
from runs.engine.versions import link_ranges, newest_matching
from runs.events import append_event_rows, append_events
from runs.metrics import custom_metric_rows
from runs.models import (
    TERMINAL,
    Artifact,
    LLMCall,
    MemoryItem,
    Run,
    RunMetric,
    RunStatus,
    StepRun,
    ToolCall,
)
from runs.tracing import trace_export_schedule
from runs.webhooks import webhook_attention_schedule, webhook_schedule

_ZERO = Decimal(0)
_MICRO = Decimal("0.000001")
log = logging.getLogger(__name__)
_DEFINITIONS: OrderedDict[tuple[int, str], dict] = OrderedDict()
_DEFINITIONS_LOCK = threading.Lock()
_DEFINITIONS_KEPT = 2048  # versions' definitions kept per process (a few KB each, shared)


def pinned_definition(version_id: int, entity_id: Any) -> dict:
    """A version's snapshot; versions never change, so each process reads one once. The key
    includes the entity's UUID: a version id alone can come back after a delete (SQLite)."""
    key = (version_id, str(entity_id))
    with _DEFINITIONS_LOCK:
        found = _DEFINITIONS.get(key)
        if found is not None:
            _DEFINITIONS.move_to_end(key)
            return found
    definition = pinned.shared(
        EntityVersion.objects.values_list("definition", flat=True).get(pk=version_id)
    )
    with _DEFINITIONS_LOCK:
        _DEFINITIONS[key] = definition
        while len(_DEFINITIONS) > _DEFINITIONS_KEPT:
            _DEFINITIONS.popitem(last=False)
    return definition


def _limit_row(row: Run) -> LimitRow:
    definition = pinned_definition(row.entity_version_id, row.entity_id)
    return LimitRow(
        id=str(row.pk),
        name=row.entity.name,
        llm_calls=row.llm_calls,
        max_llm_calls=row.max_llm_calls,
        tool_calls=row.tool_calls,
        max_tool_calls=row.max_tool_calls,
        total_cost_usd=row.total_cost_usd,
        reserved_usd=row.reserved_usd,
        budget_usd=row.budget_usd,
        blocks=budget_blocks(definition),
    )


_UNKNOWN = object()
_VAULT = object()


def run_data_sealed(definition: dict, value: Any) -> Any:
    """A run's input or context as the stores write what the engine reads back, under the
    entity's pii_handling (runs/engine/pii_copies.py): for `run_start`."""
    return PiiCopies(SafetyScreening(), PiiCipher()).sealed(definition, value)


def lifetime_left(entity_id: Any, limit: Decimal) -> Decimal:
    """What an entity's cumulative_cost_usd leaves for a new run: the limit, less what its
    ended runs cost and what its unfinished ones may still cost (their budgets). Takes the
    entity's row lock until commit, so two runs starting at once share what is left."""
    Entity.objects.select_for_update().filter(pk=entity_id).values_list("pk", flat=True).first()
    runs = Run.objects.filter(entity_id=entity_id)
    spent = runs.filter(status__in=TERMINAL).aggregate(total=Sum("total_cost_usd"))["total"]
    held = runs.exclude(status__in=TERMINAL).aggregate(
        total=Sum(Coalesce("budget_usd", "total_cost_usd"))
    )["total"]
    return core_lifetime_left(limit, spent=spent or _ZERO, held=held or _ZERO)


def _facts(run: RunView, now: Any) -> hitl.RunFacts:
    """The run's counters, what completed runs of its entity (roots with a root, children
    with a child) cost and took, and how long it has run."""
    counters = Run.objects.values(
        "total_cost_usd", "total_tokens", "llm_calls", "tool_calls", "budget_usd"
    ).get(pk=run.id)
    history = Run.objects.filter(
        entity_id=run.entity_id,
        status=RunStatus.COMPLETED,
        parent__isnull=run.parent_id is None,
    ).aggregate(n=Count("pk"), cost=Avg("total_cost_usd"), ms=Avg("execution_time_ms"))
    return hitl.RunFacts(
        spent_usd=counters["total_cost_usd"],
        tokens=counters["total_tokens"],
        llm_calls=counters["llm_calls"],
        tool_calls=counters["tool_calls"],
        budget_usd=counters["budget_usd"],
        history=hitl.RunHistory(
            completed=history["n"],
            mean_cost_usd=history["cost"],
            mean_ms=float(history["ms"]) if history["ms"] is not None else None,
        ),
        elapsed_ms=(now - (run.began_at or now)).total_seconds() * 1000,
    )


def _unfinished_children(parents: list[Any]) -> list[Any]:
    rows = Run.objects.filter(parent_id__in=parents).exclude(status__in=TERMINAL)
    return list(rows.values_list("pk", flat=True))


def to_micros(amount: Decimal) -> Decimal:
    """An amount of dollars as the cost columns keep it: six decimal places, halves up."""
    return amount.quantize(_MICRO, ROUND_HALF_UP)


def lease_seconds() -> int:
    return settings.HIERARCH_ENGINE["LEASE_SECONDS"]


def lease_time() -> timedelta:
    return timedelta(seconds=settings.HIERARCH_ENGINE["LEASE_SECONDS"])


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"


def latest_version(entity: Entity) -> EntityVersion:
    return entity.versions.order_by("-created_at", "-id").first()


class OrmRunStore(DispatchingStore):
    def __init__(
        self,
        owner: str | None = None,
        *,
        cipher: Any = _VAULT,
        approvals: ApprovalDesk | None = None,
        clock: ports.Clock | None = None,
        ids: ports.Ids | None = None,
    ):
        """`cipher`: pii_handling's (the vault's by default); every copy of a run's data this
        store writes goes through `self.pii` (runs/engine/pii_copies.py). `approvals`: where
        requests for people are made and read (runs/approval_desk.py; the approvals app's
        by default). `clock`: the time of what the engine decides (due times, ends, record
        stamps); leases are compared with it too. `ids`: new child runs' ids (UUIDs)."""
        self.clock = clock or ports.SystemClock()
        self.ids = ids or ports.RandomIds()
        self.owner = owner or new_owner()
        self.approvals = approvals if approvals is not None else approval_desk()
        self.pii = PiiCopies(SafetyScreening(), PiiCipher() if cipher is _VAULT else cipher)
        # The webhook_url of each root run loaded that has one: its end is POSTed there.
        self._webhooks: dict[str, str] = {}
        # Inside a transaction sent whole: what to check once the answers are in.
        self._checks: list[Callable[[], None]] | None = None
        # Runs this worker holds the lease of and goes on with (`adopt`), ready for `claim`.
        self._taken: dict[str, RunView] = {}
        # The outcome of an only child this worker ended, for its parent's join.
        self._outcomes: dict[tuple[str, str], ChildOutcome] = {}
        # Runs this worker left waiting on an only child it went on with: as it wrote them.
        self._waiting: dict[str, RunView] = {}
        # An only child's end held back to go with its parent's next write (`_Deferred`).
        self._deferred: _Deferred | None = None
        # A parent's start of its only child held back to go with the child's first write.
        self._held_spawn: _HeldSpawn | None = None
        # A held end's claim of its parent, left to go with the parent's next write in the
        # same transaction (see `_write_run`).
        self._claiming: _Deferred | None = None
        # A held start's child row, left to go in with the child's own first write of its
        # columns in the transaction that writes the start (see `_write_run`).
        self._unwritten: _Unwritten | None = None
        # The cancel flags of the ancestors of the run whose call this worker recorded last,
        # as that record's commit read them back; forgotten before the next call goes out.
        self._flags_seen: dict[str, bool] = {}
        # The cancel flag each run's fenced write read back in the commit under way (the
        # view handed back takes it: `_as_read`); cleared as each commit or record begins.
        self._read_back: dict[str, bool] = {}

    @contextlib.contextmanager
    def _transaction(
        self,
        run: RunView,
        *,
        careful: bool = False,
        items: list[tuple[str, dict]] | None = None,
        steps: list[StepRecord] | None = None,
    ) -> Iterator[None]:
        """One transaction of the run's: sent whole, in one round trip, where it can be
        (`sql.one_trip`); `careful` when it needs the ORM's row locks (an entity's lifetime
        budget, the root run's end). An answer read before the end (a budget set aside for
        new children) sends what is queued then, in a transaction opened for the rest. A
        fenced write finding the lease lost raises LeaseLost, and nothing of the transaction
        is kept.

        Writes held back go first when this is the write of the run they wait for (see
        `_held_for`): an only child's end (`_Deferred`), with its parent's lease taken on
        the condition that the parent is as this worker left it, then a parent's start of
        its only child (`_HeldSpawn`). If the transaction fails, a child's end is written
        alone, so it is never lost, and a held start is dropped: its parent is as it was
        before it (running the step that starts the child, or waiting on the child that
        ended) and goes to any worker.

        The events of the run (`items`) and of what is held back go in the transaction's
        first statement (the trace's sequence row before any run's row: one lock order), and
        their step records (`steps`) in its last."""
        if self._held_for() not in (None, run.id):
            self._flush()  # held for another run: written on their own first
        deferred, self._deferred = self._deferred, None
        spawn, self._held_spawn = self._held_spawn, None
        checks: list[Callable[[], None]] = []
        try:
            with sql.one_trip(careful=careful) as whole:
                self._checks = checks if whole else None
                try:
                    self._write_held_first(run, items, deferred, spawn)
                    yield
                    self._claim_pending()  # a parent the transaction wrote nothing else of
                    self._insert_unwritten()  # a child the transaction wrote nothing else of
                    self._write_step_rows(
                        [
                            *(self._step_rows(deferred.child, deferred.steps) if deferred else []),
                            *(self._step_rows(spawn.parent, spawn.steps) if spawn else []),
                            *self._step_rows(run, steps or []),
                        ]
                    )
                finally:
                    self._checks = None
                    self._claiming = self._unwritten = None
        except BaseException as exc:
            self._failed(exc, run, deferred, spawn)
            raise
        if spawn is not None:
            _Heartbeat.stop(spawn.parent)  # its write is in: it waits, leased to nobody
        for check in checks:  # committed: the database checked the lease; read the flags
            check()

    def _failed(
        self,
        exc: BaseException,
        run: RunView,
        deferred: _Deferred | None,
        spawn: _HeldSpawn | None,
    ) -> None:
        """After a transaction failed: a held child's end is written alone (never lost), a
        held start dropped; a fenced write that found the lease lost raises LeaseLost."""
        if deferred is not None:
            self._write_alone(deferred)
        if spawn is not None:
            self._drop(spawn, owned=deferred is None)
        lost = self._lease_lost(exc, run, claim=deferred is not None, spawn=spawn)
        if lost is not None:
            raise lost from None

    def _write_held_first(
        self,
        run: RunView,
        items: list[tuple[str, dict]] | None,
        deferred: _Deferred | None,
        spawn: _HeldSpawn | None,
    ) -> None:
        """A transaction's first statements: the events of the run and of what is held back
        (one statement a trace), then a held end (its parent's claim goes with the parent's
        write, or alone) and a held start."""
        self._append(
            [
                (held.trace_id, held.id, self._kept_items(held, held_items))
                for held, held_items in (
                    (deferred and deferred.child, deferred and deferred.items),
                    (spawn and spawn.parent, spawn and spawn.items),
                    (run, items),
                )
                if held_items
            ]
        )
        if deferred is not None:
            deferred.write()
            self._claiming = deferred
        if spawn is not None:
            spawn.write()

    @staticmethod
    def _lease_lost(
        exc: BaseException, run: RunView, *, claim: bool, spawn: _HeldSpawn | None
    ) -> LeaseLost | None:
        """A failed transaction that found the lease lost: LeaseLost naming the run to wake
        when a held claim or start was refused; None for any other failure."""
        lost = sql.claim_refused(exc) or (isinstance(exc, DatabaseError) and sql.lease_lost(exc))
        if not lost:
            return None
        if claim or spawn is not None:
            woken = spawn.parent.id if spawn is not None else run.id
            return LeaseLost(
                f"run {woken} changed while this worker went on, or another worker holds it",
                wake=woken,
            )
        return LeaseLost(f"run {run.id} is held by another worker")

    def _held_for(self) -> str | None:
        """The run whose next write takes the writes held back: the child a held start
        creates, else the parent a held end wakes."""
        if self._held_spawn is not None:
            return self._held_spawn.child_id
        if self._deferred is not None:
            return self._deferred.parent.id
        return None

    def _write_alone(self, deferred: _Deferred) -> None:
        """A held-back child's end in a transaction of its own."""
        with self._transaction(deferred.child, items=deferred.items, steps=deferred.steps):
            deferred.write()

    def _kept_items(self, run: RunView, items: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        """Events as the entity's log_level writes them (runs/engine/observability.py) and
        pii_handling keeps them (they are shown, never read back)."""
        items = events_kept(run.definition, items)
        if not items or self.pii.mode(run.definition) == "ALLOW":
            return items
        return [(kind, self.pii.kept(run.definition, payload)) for kind, payload in items]

    @staticmethod
    def _append(runs_items: list[tuple[str, str, list[tuple[str, dict]]]]) -> None:
        """The events of several runs, `(trace_id, run_id, items)`: one statement a trace."""
        by_trace: dict[str, list[tuple[str, str, dict]]] = {}
        for trace_id, run_id, items in runs_items:
            by_trace.setdefault(trace_id, []).extend((run_id, k, p) for k, p in items)
        for trace_id, rows in by_trace.items():
            append_event_rows(trace_id, rows)

    def _drop(self, spawn: _HeldSpawn, *, owned: bool) -> None:
        """A held start that could not be written: its child never existed. The parent,
        when this worker still holds it (not taken over from its child), is let go."""
        self._taken.pop(spawn.child_id, None)
        self._waiting.pop(spawn.parent.id, None)
        _Heartbeat.stop(spawn.parent)
        if owned:
            with contextlib.suppress(Exception):
                sql.release(spawn.parent.id, self.owner)

    def _flush(self, run: RunView | None = None) -> None:
        """Write what is held back now: before a tool call, a read, a person, the end of a
        turn, or a write of another run. With the run it is held for (`run`), or a view of
        it, the parent's lease is taken too; else a held end is written alone (its parent,
        never claimed, goes to any worker) and a held start with its parent's claim."""
        held_for = self._held_for()
        if held_for is None:
            return
        if run is not None and run.id == held_for:
            with self._transaction(run):
                pass
            return
        if self._held_spawn is not None:
            with self._transaction(self._taken.get(held_for) or self._held_spawn.child):
                pass
            return
        deferred, self._deferred = self._deferred, None
        self._taken.pop(deferred.parent.id, None)
        self._write_alone(deferred)

    def _settle(self, check: Callable[[], None]) -> None:
        """Run `check` once the answers it reads are in: at once, or after the transaction."""
        if self._checks is None:
            check()
        else:
            self._checks.append(check)

    # -- lease ---------------------------------------------------------------------------------

    def claim(self, run_id: str) -> RunView | None:
        if self._held_for() not in (None, run_id):
            with contextlib.suppress(LeaseLost):  # what was held is another worker's now
                self._flush()
        view = self._taken.pop(run_id, None)
        if view is None:
            # Child resolutions hold for one advance only (a run this worker went on with
            # itself is part of the same advance, a second or so at most).
            self.__dict__.pop("_children", None)
            self._flags_seen = {}
            row = self._claim(run_id).value()
            if row is None:
                return None
            view = self._view(row)
        _Heartbeat.start(view, self.owner)
        return view

    def _claim(self, run_id: str) -> sql.Later:
        now = self.clock.now()
        return sql.claim(
            run_id,
            self.owner,
            now,
            now + timedelta(seconds=lease_seconds()),
            terminal=TERMINAL,
            asleep=_ASLEEP,
            names=_VIEW_FIELDS,
        )

    def _holds(self, run_id: str) -> bool:
        return run_id in self._taken

    def let_go(self, run_id: str) -> None:
        if self._held_spawn is not None and self._held_spawn.child_id == run_id:
            self._flush()  # the child must exist before any worker can take it
        if self._deferred is not None and self._deferred.parent.id == run_id:
            self._flush()  # the child's end alone: the parent was never claimed
            return
        if self._taken.pop(run_id, None) is not None:
            sql.release(run_id, self.owner)

    def _view(self, row: dict[str, Any]) -> RunView:
        """The engine's view of a run row claimed for this worker."""
        if row["webhook_url"]:
            self._webhooks[str(row["id"])] = row["webhook_url"]
        state = self.pii.opened(row["state"])
        plan = self.pii.opened(row["dynamic_plan"])
        output = self.pii.opened(row["output_data"])
        return RunView(
            id=str(row["id"]),
            trace_id=str(row["trace_id"]),
            workspace_id=row["workspace"],
            definition=pinned_definition(row["entity_version"], row["entity"]),
            status=row["status"],
            input=self.pii.opened(row["input_data"]),
            state=state,
            plan=plan,
            cursor=row["cursor"],
            iteration=row["iteration"],
            attempt=row["attempt"],
            depth=row["depth"],
            depth_limit=row["depth_limit"],
            parent_id=str(row["parent"]) if row["parent"] else None,
            entity_status=row["entity_status"],
            output=output,
            error_code=row["error_code"],
            error_message=row["error_message"],
            cancel_requested=row["cancel_requested"],
            lineage=list(row["lineage"]),
            parent_step_key=row["parent_step_key"],
            spawn_group=row["spawn_group"],
            began_at=row["started_at"] or row["created_at"],
            started=row["started_at"] is not None,
            # A lease left behind means the last worker died mid-advance: look for calls it
            # recorded before paying for them again.
            resumed=row["resumed"],
            created_by_id=row["created_by"],
            entity_id=str(row["entity"]),
            cancel_fresh=True,
            deadline=row["deadline_at"],
            budget_anchor=str(row["budget_anchor"]) if row["budget_anchor"] else None,
            limited=row["limited"],
            trial=row["trial"],
            sandbox=row["sandbox"],
            passes_granted=row["passes_granted"],
            export_trace_id=str(row["export_trace_id"]) if row["export_trace_id"] else None,
            row_json={"state": state, "dynamic_plan": plan, "output_data": output},
        )

    def _cancel_requested(self, run: RunView) -> RunView:
        """Asked before each step. Every write of the run reads the flag back, and a step's
        last act is a write, so the answer is usually at hand; else one query. A child whose
        start is held back (`_hold_spawn`) takes its parent's flag, as its row will take it
        when written: read now, or, after a sibling's call, as that call's record read back
        every ancestor's flag (nothing was sent out since: as fresh as a run's own flag after
        its write). A parent the worker goes on with after its child's end takes its flag
        from there too, which is fresher than its own last write."""
        cancelled = run.cancel_requested or bool(self._flags_seen.get(run.id))
        spawn = self._held_spawn
        if spawn is not None and spawn.child_id == run.id and not cancelled:
            known = self._flags_seen.get(spawn.parent.id)
            cancelled = known if known is not None else sql.cancel_flag(spawn.parent.id)
        elif not cancelled and not run.cancel_fresh:
            cancelled = Run.objects.filter(pk=run.id, cancel_requested=True).exists()
        if cancelled == run.cancel_requested and not run.cancel_fresh:
            return run
        return run.changed(cancel_requested=cancelled, cancel_fresh=False)

    def release(self, run: RunView) -> None:
        spawn = self._held_spawn
        if spawn is not None and spawn.parent.id == run.id:
            return  # its start is held back: it stays leased (and beating) until that is in
        _Heartbeat.stop(run)
        if self._held_spawn is not None and self._held_spawn.child_id == run.id:
            self._flush(run)  # the child's turn ended before its first write (it failed)
        deferred = self._deferred
        if deferred is not None and deferred.child.id != run.id:
            # The parent's turn ended without a write of its own (it failed): the child's
            # end alone; the parent, never claimed, is the sweeper's to hint.
            self._taken.pop(deferred.parent.id, None)
            self._deferred = None
            self._write_alone(deferred)
            if deferred.parent.id == run.id:
                return
        if run.status in TERMINAL or run.released:
            return  # finish, spawn or schedule already let go of the lease
        sql.release(run.id, self.owner)

    def _seen(self, run: RunView, cancelled: bool | None) -> None:
        """Take a fenced write's answer: the lease is lost (None), or the cancel flag (for
        the view handed back: `_as_read`)."""
        if cancelled is None:
            raise LeaseLost(f"run {run.id} is held by another worker")
        self._read_back[run.id] = run.cancel_requested or cancelled

    def _as_read(self, run: RunView) -> RunView:
        """The view to hand back after a commit: with the cancel flag its write read back."""
        cancelled = self._read_back.pop(run.id, None)
        if cancelled is None:
            return run
        return run.changed(cancel_requested=cancelled, cancel_fresh=True)

    # -- progress -----------------------------------------------------------------------------

    def _write_run(self, run: RunView, **extra: Any) -> RunView:
        """Write the run's row from its view, fenced on the lease; the view as written
        (started, once it is)."""
        now = self.clock.now()
        fields = {
            "status": run.status,
            "cursor": run.cursor,
            "iteration": run.iteration,
            "attempt": run.attempt,
            "error_code": run.error_code,
            "error_message": self.pii.kept(run.definition, run.error_message[:10_000]),
            "lease_expires_at": now + timedelta(seconds=lease_seconds()),
            "deadline_at": run.deadline,
        }
        # The JSON columns only when the engine gave them a new value since the last write
        # that committed (it replaces them, never changes them in place): a plan sent again
        # with every step is parsed again by the database for nothing.
        kept = run.row_json
        changed = {
            name: value
            for name, value in (
                ("state", run.state),
                ("dynamic_plan", run.plan),
                ("output_data", run.output),
            )
            if kept.get(name, _UNKNOWN) is not value
        }
        fields.update(
            {name: self.pii.sealed(run.definition, value) for name, value in changed.items()},
            **extra,
        )
        view = run
        if run.status != RunStatus.PENDING and not run.started:
            fields["started_at"] = run.began_at or now
            view = run.changed(started=True, began_at=run.began_at or now)
        claiming, claim = self._claiming, None
        if claiming is not None and claiming.parent.id == run.id:
            self._claiming, claim = None, claiming.terms(now)  # one statement: claim and write
        self._claim_pending()
        unwritten = self._unwritten
        if unwritten is not None and unwritten.run_id == run.id:
            # Its row goes in now, as written: one statement, and the start (a change of its
            # status, which the status index keeps) costs no update. Its flag is its
            # parent's, which the parent's write in this transaction reads back.
            self._insert_unwritten(fields)
            parent = unwritten.parent  # its write in this transaction read its flag back first
            self._settle(
                lambda: self._seen(run, self._read_back.get(parent.id, parent.cancel_requested))
            )
        else:
            # Fenced: only the lease holder writes; a worker that lost the lease stops here.
            written = sql.update_run(run.id, self.owner, fields, claim=claim)
            self._settle(lambda: self._seen(run, written.value()))
        if changed:
            sql.on_commit(lambda: kept.update(changed))
        return view

    def _insert_unwritten(self, fields: dict[str, Any] | None = None) -> None:
        """The row of the child a held start creates, with `fields` of the child's own first
        write when it comes before anything else needs the row."""
        self._claim_pending()  # its parent's row first, as the parent's lease
        unwritten, self._unwritten = self._unwritten, None
        if unwritten is not None:
            sql.insert(Run, [{**unwritten.row, **(fields or {})}])

    def _claim_pending(self) -> None:
        """The claim of a held end's parent, alone: before a statement of another run's."""
        claiming, self._claiming = self._claiming, None
        if claiming is not None:
            claiming.claim(self.owner, self.clock.now())

    def _write_steps(self, run: RunView, steps: list[StepRecord]) -> None:
        """Insert or update the step records in one statement."""
        self._write_step_rows(self._step_rows(run, steps))

    def _step_rows(self, run: RunView, steps: list[StepRecord]) -> list[dict[str, Any]]:
        now = self.clock.now()
        kept = self.pii.kept
        return [
            {
                "run": run.id,
                "step_key": step.key,
                "iteration": step.iteration,
                "attempt": step.attempt,
                "position": step.position,
                "name": step.name[:200],
                "type": step.type,
                "status": step.status,
                "input": kept(run.definition, step.input),
                "output": kept(run.definition, step.output),
                "error_code": step.error_code,
                "error_message": kept(run.definition, step.error_message[:10_000]),
                "started_at": step.started_at or now,
                "finished_at": now if step.status in _STEP_DONE else None,
            }
            for step in steps
        ]

    @staticmethod
    def _write_step_rows(rows: list[dict[str, Any]]) -> None:
        if rows:
            sql.insert(
                StepRun,
                rows,
                conflict=("run", "step_key", "iteration", "attempt"),
                update=_STEP_UPDATED,
            )

    def _count(
        self,
        run: RunView,
        *,
        cost: Decimal = _ZERO,
        tokens: int = 0,
        llm_calls: int = 0,
        tool_calls: int = 0,
        reserved: Decimal | None = None,
        record: tuple[str, list[Any]] | None = None,
    ) -> None:
        """A call counts for the run and every ancestor (when `reserved` is not None,
        `reserve_call` counted it already and set `reserved` aside: that is settled now);
        the same statement renews the run's lease, or finds it lost. A call that takes a
        run's cost across its alert threshold raises the alert, once. `record`, the call's
        record (`sql.insert_statement`), goes in with the counters."""
        self._insert_unwritten()  # the counters' write needs the run's row (and its parent's
        # lease taken, when the end of a child this worker went on from is in this write)
        counted = sql.add_counters(
            run.id,
            run.lineage,
            self.owner,
            self.clock.now() + timedelta(seconds=lease_seconds()),
            cost=cost,
            tokens=tokens,
            llm_calls=0 if reserved is not None else llm_calls,
            tool_calls=0 if reserved is not None else tool_calls,
            anchor=run.budget_anchor,
            estimate=reserved,
            record=record,
        )
        self._settle(lambda: self._counted(run, counted.value()))

    def _counted(
        self, run: RunView, answer: tuple[bool, list[str], dict[str, bool]] | None
    ) -> None:
        self._seen(run, None if answer is None else answer[0])
        self._flags_seen.update(answer[2])
        # The alerts are this run's events (and log line): its log_level keeps them or not.
        alerts = events_kept(run.definition, [("cost.alert", {"run_id": c}) for c in answer[1]])
        if alerts:
            append_events(run.trace_id, run.id, alerts)
            log.warning("runs %s crossed their cost alert threshold", ", ".join(answer[1]))

    # -- limits ---------------------------------------------------------------------------

    def reserve(
        self, run: RunView, *, llm_calls: int = 0, tool_calls: int = 0, estimate: Decimal
    ) -> LimitReached | None:
        self._flush(run)  # a held-back child's end first
        if sql.reserve(
            run.id,
            run.lineage,
            llm_calls=llm_calls,
            tool_calls=tool_calls,
            anchor=run.budget_anchor,
            estimate=estimate,
        ).value():
            return None
        return self._refusal(run, llm_calls, tool_calls, estimate)

    def _refusal(
        self, run: RunView, llm_calls: int, tool_calls: int, estimate: Decimal
    ) -> LimitReached:
        """Why `reserve` found no room: the first run, from this one up, whose limit is hit."""
        rows = {
            str(row.pk): row
            for row in Run.objects.filter(pk__in=[run.id, *run.lineage]).select_related("entity")
        }
        ordered = [_limit_row(rows[r]) for r in [run.id, *reversed(run.lineage)] if r in rows]
        found = first_limit_hit(
            ordered,
            anchor=run.budget_anchor,
            llm_calls=llm_calls,
            tool_calls=tool_calls,
            estimate=estimate,
        )
        return found or LimitReached(LIMIT_EXCEEDED, "a call limit was reached")  # raced

    def _no_room_for_children(self, run: RunView, amount: Decimal) -> LimitReached:
        row = Run.objects.select_related("entity").get(pk=run.budget_anchor)
        return no_room_for_children(_limit_row(row), amount)

    def unreserve(self, run: RunView, estimate: Decimal) -> None:
        self._flush(run)  # a held-back child's end first
        if run.budget_anchor is not None and estimate:
            sql.unreserve(run.budget_anchor, estimate)

    def _cancel_descendants(self, run: RunView, fired: tuple[str, str] | None) -> list[str]:
        """Ask the run's unfinished descendants to stop, as it ends; `fired` (reason, by:
        `hiring.fired_with`) is recorded on those it hired directly, with a `run.fired`
        event and a RUN_FIRED audit record each, as `run_fire` records an operator's, in
        the same transaction as the cancel. A run that was fired itself fires nobody: its
        hires are cancelled with it."""
        self._flush(run)  # a held-back child's end first
        with transaction.atomic():
            if fired is not None:
                self._fire_hires(run, *fired)
            found = descendants(run.id, _unfinished_children)
            if found:
                Run.objects.filter(pk__in=found).update(cancel_requested=True)
        return [str(pk) for pk in found]

    @staticmethod
    def _fire_hires(run: RunView, reason: str, by: str) -> None:
        hires = list(
            Run.objects.select_for_update(of=("self",))
            .filter(hired_by_id=run.id, fired_reason__isnull=True)
            .exclude(status__in=TERMINAL)
            .exclude(hired_by__fired_reason__isnull=False)
            .values_list("pk", "role")
        )
        if not hires:
            return
        Run.objects.filter(pk__in=[pk for pk, _ in hires]).update(fired_reason=reason, fired_by=by)
        for pk, role in hires:
            audit_record(
                workspace=run.workspace_id,
                action=AuditAction.RUN_FIRED,
                object_type="run",
                object_id=pk,
                object_label=str(role or "")[:200],
                after={"reason": reason, "by": by, "hired_by": run.id},
            )
        event = ("run.fired", {"reason": reason, "by": by})
        OrmRunStore._append([(run.trace_id, str(pk), [event]) for pk, _ in hires])

    # -- the port: commits, records, reads ----------------------------------------------------

    def commit(self, run: RunView, transition: ports.Transition) -> ports.Committed:
        self._read_back.clear()
        t = transition
        if isinstance(t, ports.Save):
            done = ports.Committed(self._save(run, t))
        elif isinstance(t, ports.Schedule):
            done = ports.Committed(self._schedule(run, t))
        elif isinstance(t, ports.Spawn):
            run, ids = self._spawn(run, t)
            taken = ids[0] if ids and self._holds(ids[0]) else None
            done = ports.Committed(run, child_ids=tuple(ids), taken=taken)
        elif isinstance(t, ports.Finish):
            fired = fired_with(run)  # its unfinished hires are fired with it
            stopped = self._cancel_descendants(run, fired) if t.stop_descendants or fired else []
            run, woken = self._end(run, t)
            taken = woken if woken is not None and self._holds(woken) else None
            done = ports.Committed(run, woken=woken, stopped=tuple(stopped), taken=taken)
        else:
            done = ports.Committed(self._request_approval(run, t))
        read = self._as_read(done.run)
        return done if read is done.run else replace(done, run=read)

    def _save(self, run: RunView, save: ports.Save) -> RunView:
        run, steps, items = take_pending(run, save.steps, save.events.items)
        # A run written BLOCKED waits on a person: its root's webhook is told, in the same
        # transaction (the ORM's: careful), after the run's events.
        blocked = run.status == RunStatus.BLOCKED
        with self._transaction(run, careful=blocked, items=items, steps=steps):
            run = self._write_run(run)
            if blocked:
                webhook_attention_schedule(trace_id=run.trace_id, run_id=run.id)
        return run

    def _schedule(self, run: RunView, schedule: ports.Schedule) -> RunView:
        run, steps, items = take_pending(run, schedule.steps, schedule.events.items)
        with self._transaction(run, items=items, steps=steps):
            run = self._write_run(
                run,
                wake_at=self.clock.now() + timedelta(seconds=schedule.delay_s),
                lease_owner="",
                lease_expires_at=None,
            )
        return run.changed(released=True)

    def _spawn(self, run: RunView, spawn: ports.Spawn) -> tuple[RunView, list[str]]:
        children, steps, events, adopt = spawn.children, spawn.steps, spawn.events, spawn.adopt
        self._resolve_many(run, [request.entity_ref for request in children])
        group = f"{children[0].step_key}#{run.iteration}#{run.attempt}/{len(children)}"
        now = self.clock.now()
        found = [self._resolved(run, r.entity_ref) for r in children]
        definitions = [pinned_definition(version.pk, entity.pk) for entity, version in found]
        # An entity's lifetime budget takes its row lock through the ORM: careful then.
        lifetimes = [lifetime_limit(child) for child in definitions]
        careful = any(limit is not None for limit in lifetimes)
        if (
            adopt
            and len(children) == 1
            and not careful
            and not (run.cancel_requested or run.limited or run.budget_anchor)
            and run_limits(definitions[0], "", None)["budget_usd"] is None
            and (children[0].hire is None or children[0].hire.budget_usd is None)
            and self._held_spawn is None
        ):
            return self._hold_spawn(run, children, steps, events, found, definitions, group, now)
        rows: list[dict[str, Any]] = []
        with self._transaction(run, careful=careful):
            reserve, quota = self._child_rows(
                run, children, found, definitions, lifetimes, group, now, rows, events
            )
            taken, steps, items = take_pending(run, steps, events.items)
            written = self._write_spawn(
                taken, rows, reserve, steps, items, adopt=adopt, quota=quota
            )
        written = self._as_read(written)  # as the spawn's write read its flag back
        if adopt:
            self._take_child(written, rows[0], found[0][0], definitions[0], group, now)
        return written, [str(row["id"]) for row in rows]

    def _hold_spawn(
        self,
        run: RunView,
        children: list[ChildRequest],
        steps: list[StepRecord],
        events: Events,
        found: list[tuple[_Child, _Version]],
        definitions: list[dict],
        group: str,
        now: Any,
    ) -> tuple[RunView, list[str]]:
        """Start an only child by holding the parent's write back to go with the child's
        first write, which this worker goes on to make: one transaction instead of two.
        Nothing outside the database happens in between but the child's model call (a tool
        call, a read, a person or the end of the child's turn writes it first: `_flush`);
        should the write fail, that call is all that is lost, as with a worker that dies
        before recording it. The parent stays leased to this worker, its lease renewed,
        until the write is in."""
        rows: list[dict[str, Any]] = []
        _, quota = self._child_rows(
            run, children, found, definitions, [None], group, now, rows, events
        )
        if quota is not None:  # a hire holding none of the quota: only checked, at once
            self._quota_hold(run, quota)
        run, steps, items = take_pending(run, steps, events.items)
        run = run.changed(released=True)  # by the held write
        parent = run

        def write() -> None:  # its events and step records go with the transaction's own
            self._write_spawn(parent, rows, _ZERO, [], [], adopt=True, held=True)

        child = self._take_child(run, rows[0], found[0][0], definitions[0], group, now)
        self._held_spawn = _HeldSpawn(
            parent=run, child=child, write=write, items=items, steps=steps
        )
        return run, [child.id]

    def _child_rows(
        self,
        run: RunView,
        children: list[ChildRequest],
        found: list[tuple[_Child, _Version]],
        definitions: list[dict],
        lifetimes: list[Decimal | None],
        group: str,
        now: Any,
        rows: list[dict[str, Any]],
        events: Events,
    ) -> tuple[Decimal, Decimal | None]:
        """The new children's rows (into `rows`) and `run.created` events; answers what
        their own budgets set aside at the run's anchor, and what the hires among them hold
        of the workspace's monthly cost quota (None: no hire). A lifetime budget is read
        under the entity's row lock: inside the transaction then."""
        reserve, quota = _ZERO, None
        for request, (entity, version), child, limit in zip(
            children, found, definitions, lifetimes, strict=True
        ):
            child_id, left = uuid.UUID(self.ids.new_id()), None
            if limit is not None:  # under the entity's row lock until commit
                left = lifetime_left(entity.pk, limit)
                if left <= 0:
                    raise lifetime_used(entity.name, limit)
            limits = run_limits(child, str(child_id), run.budget_anchor, left)
            hire = request.hire
            if hire is not None:  # its hirer's budget for it (runs/engine/hiring.py)
                limits = hired_limits(limits, hire.budget_usd, str(child_id))
            limits["limited"] = limits["limited"] or run.limited
            if limits["budget_usd"] is not None and run.budget_anchor is not None:
                reserve += limits["budget_usd"]
            state = request.state or {}
            if hire is not None:  # held until it ends (`_write_end`)
                held = quota_hold(limits["budget_usd"], run.budget_anchor)
                quota = (quota or _ZERO) + held
                if held:
                    state = {**state, QUOTA_HELD_KEY: str(held)}
            rows.append(
                {
                    **limits,
                    **hired_fields(hire, run.id),
                    "deadline_at": run.deadline,
                    "id": child_id,
                    "workspace": run.workspace_id,
                    "entity": entity.pk,
                    "entity_version": version.pk,
                    "parent": run.id,
                    "root": run.trace_id,
                    "trace_id": run.trace_id,
                    "parent_step_key": child_step_key(request.step_key, run.iteration, run.attempt),
                    "state": self.pii.sealed(child, state),
                    "group_index": request.group_index,
                    "spawn_group": group,
                    "depth": run.depth + 1,
                    "depth_limit": run.depth_limit,
                    "lineage": [*run.lineage, run.id],
                    "input_data": self.pii.sealed(child, request.input),
                    "created_by": run.created_by_id,
                    "created_at": now,
                    "cancel_requested": False,
                    "trial": run.trial,
                    "sandbox": run.sandbox,
                    "export_trace_id": child_export_trace(run, str(child_id)),
                }
            )
            events.items.append(
                payloads.run_created(str(child_id), entity.name, entity.type, run.id)
            )
        return reserve, quota

    def _write_spawn(
        self,
        run: RunView,
        rows: list[dict[str, Any]],
        reserve: Decimal,
        steps: list[StepRecord],
        items: list[tuple[str, dict]],
        *,
        adopt: bool,
        held: bool = False,
        quota: Decimal | None = None,
    ) -> RunView:
        """The statements of a spawn, inside its transaction (the run as written). A held
        start's only child's row is left for the child's first write (`_unwritten`).
        `quota`: what its hires hold of the workspace's monthly cost quota (None: it hires
        nobody)."""
        # The trace's sequence row, then the workspace's, then the runs' rows: one lock
        # order (an entity's row, for its lifetime budget, comes before them).
        append_events(run.trace_id, run.id, self._kept_items(run, items))
        # Every hire is checked against the workspace's monthly cost quota, and those with
        # budgets that count against it set them aside there: one statement.
        if quota is not None:
            self._quota_hold(run, quota)
        # Children with budgets of their own set them aside at this run's anchor (seed 004):
        # all of them or none, so siblings never overspend it together.
        if reserve and not sql.reserve_budget(run.budget_anchor, reserve).value():
            raise self._no_room_for_children(run, reserve)
        # The run waits now: let go of the lease in the same write, which locks the run's
        # row: a cancel that came first reaches the new children, which take the flag from
        # the row as they go in; one that comes later finds them (run_cancel locks this row
        # too).
        written = self._write_run(run, lease_owner="", lease_expires_at=None)
        flag = sql.Computed(_PARENTS_CANCEL_FLAG, (sql.run_id_param(run.id),))
        leased = {}
        if adopt:  # the first child is created leased to this worker, which goes on with it
            leased = {
                "lease_owner": self.owner,
                "lease_expires_at": self.clock.now() + lease_time(),
            }
        new = [
            {**_NEW_RUN, **row, "cancel_requested": flag, **(leased if i == 0 else {})}
            for i, row in enumerate(rows)
        ]
        if held:
            self._unwritten = _Unwritten(run_id=str(rows[0]["id"]), row=new[0], parent=run)
        else:
            sql.insert(Run, new)
        for row in rows:  # each hire is audited with its run (runs/engine/hiring.py)
            if row.get("hired_by") is not None:
                audit_record(
                    workspace=run.workspace_id,
                    action=AuditAction.RUN_HIRED,
                    object_type="run",
                    object_id=row["id"],
                    object_label=str(row["role"])[:200],
                    after={
                        "hired_by": run.id,
                        "role": row["role"],
                        "task": row["task"],
                        "reason": row["hired_reason"],
                        "budget_usd": row["budget_usd"],
                    },
                )
        self._write_steps(run, steps)
        return written.changed(released=True)

    def _quota_hold(self, run: RunView, amount: Decimal) -> None:
        """Check hires against the workspace's monthly cost quota and set aside `amount`,
        what they hold of it (`sql.quota_hold`); LimitReached with the figures when it has
        no room."""
        since = month_start(self.clock.now())
        if not sql.quota_hold(run.workspace_id, amount, since).value():
            name, limit, spent, held = sql.quota_figures(run.workspace_id, since)
            raise quota_refused(name, limit, spent=spent, held=held, amount=amount)

    def _take_child(
        self,
        run: RunView,
        first: dict[str, Any],
        entity: _Child,
        definition: dict,
        group: str,
        now: Any,
    ) -> RunView:
        """The view of the first child, leased to this worker by its spawn, ready for
        `claim`. Its cancel flag is the parent's as the spawn's write read it back (the
        parent's row locked in between); a held spawn starts only children of a run with
        none."""
        child = self._taken[str(first["id"])] = RunView(
            id=str(first["id"]),
            trace_id=run.trace_id,
            workspace_id=run.workspace_id,
            definition=definition,
            status=RunStatus.PENDING,
            input=first["input_data"],
            state=first["state"],
            plan=None,
            cursor=0,
            iteration=1,
            depth=first["depth"],
            parent_id=run.id,
            entity_status=entity.status,
            depth_limit=first["depth_limit"],
            lineage=first["lineage"],
            parent_step_key=first["parent_step_key"],
            spawn_group=group,
            began_at=now,
            created_by_id=run.created_by_id,
            entity_id=str(entity.pk),
            cancel_requested=run.cancel_requested,
            cancel_fresh=True,
            deadline=run.deadline,
            budget_anchor=first["budget_anchor"],
            limited=first["limited"],
            trial=run.trial,
            sandbox=run.sandbox,
            export_trace_id=first["export_trace_id"],
            row_json={"state": first["state"], "dynamic_plan": None, "output_data": None},
        )
        if group.endswith("/1") and not (run.cancel_requested or run.limited or run.budget_anchor):
            # As written: the child's end may go with this run's next write. (It shares the
            # run's `row_json`: a held write updates it.)
            self._waiting[run.id] = run
        return child

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        keys = [child_step_key(key, run.iteration, run.attempt) for key in step_keys]
        if len(keys) == 1 and (run.id, keys[0]) in self._outcomes:
            return [self._outcomes.pop((run.id, keys[0]))]  # its only child, ended here
        entities = sql.quote(Entity._meta.db_table)
        rows = sql.select(
            Run,
            _CHILD_FIELDS,
            f"parent_id = %s AND parent_step_key IN ({sql.marks(keys)})",
            [sql.run_id_param(run.id), *keys],
            extra=f"(SELECT e.name FROM {entities} e WHERE e.id = entity_id)",  # noqa: S608
            order="group_index",
        )
        if any(row["status"] not in TERMINAL for row, _ in rows):
            return None
        return [
            ChildOutcome(
                run_id=str(row["id"]),
                step_key=row["parent_step_key"].rsplit("#", 1)[0],
                status=row["status"],
                output=self.pii.opened(row["output_data"]),
                error_code=row["error_code"],
                error_message=row["error_message"],
                entity_name=entity_name,
                fired_reason=row["fired_reason"],
            )
            for row, (entity_name,) in rows
        ]

    def _end(self, run: RunView, finish: ports.Finish) -> tuple[RunView, str | None]:
        run, steps, items = take_pending(run, finish.steps, finish.events.items)
        parent = self._waiting.pop(run.parent_id, None) if run.parent_id else None
        if (
            finish.adopt
            and parent is not None
            and self._deferred is None
            and self._held_spawn is None  # its own start first: this end goes in with it
            and run.spawn_group.endswith("/1")
            and run.status != RunStatus.CANCELLED  # its row may say it was fired: read it
            and not run.limited
            and run.budget_anchor is None
        ):
            return run, self._defer_end(run, parent, steps, items, self.clock.now())
        return self._write_end(run, finish, steps, items)

    def _write_end(
        self,
        run: RunView,
        finish: ports.Finish,
        steps: list[StepRecord],
        items: list[tuple[str, dict]],
    ) -> tuple[RunView, str | None]:
        """A run's end in a transaction of its own, with its parent's wake (and lease, with
        `adopt`): the run as written, and the parent it woke."""
        now, adopt = self.clock.now(), finish.adopt
        claimed: sql.Later | None = None
        # A root run's end uses the ORM (memory, webhooks): careful. So does a run ended
        # BLOCKED (its root's webhook is told, as `_save` does).
        blocked = run.status == RunStatus.BLOCKED
        careful = run.parent_id is None or blocked
        with self._transaction(run, careful=careful, items=items, steps=steps):
            written = self._write_run(
                run,
                completed_at=now,
                execution_time_ms=int((now - run.began_at).total_seconds() * 1000),
                lease_owner="",
                lease_expires_at=None,
            )
            self._record_metrics(run, now)
            if run.parent_id is not None and run.budget_anchor == run.id:
                sql.return_budget(run.id, run.parent_id)  # what it did not use goes back
            if run.state.get(QUOTA_HELD_KEY):  # a hire: its hold on the workspace's quota
                sql.quota_release(run.workspace_id, Decimal(run.state[QUOTA_HELD_KEY]))
            if finish.forget is not None:
                _memory_items(finish.forget).delete()
            if blocked:
                webhook_attention_schedule(trace_id=run.trace_id, run_id=run.id)
            if run.parent_id is None:
                url = self._webhooks.pop(run.id, None)  # this process is done with the run
                if url:
                    webhook_schedule(run_id=run.id, url=url, status=run.status)
                trace_export_schedule(trace_id=run.trace_id, status=run.status)
                return written, None
            only_child = run.spawn_group.endswith("/1")
            # An only child has no sibling to race: it wakes the parent, whose claim finds
            # nothing to do if it is not waiting any more. Else lock the parent so siblings
            # finishing at the same moment take turns; the last one sees every sibling
            # finished and wakes the parent. (Sent whole, the transaction waits here for
            # the answers so far.)
            if not only_child:
                if sql.lock_status(run.parent_id) != RunStatus.WAITING:
                    return written, None
                if sql.group_unfinished(run.parent_id, run.spawn_group, TERMINAL):
                    return written, None
            if adopt:  # this worker goes on with the parent: its lease, in the same commit
                claimed = self._claim(run.parent_id)
        row = claimed.value() if claimed is not None else None
        if row is not None:
            self._taken[run.parent_id] = self._view(row)
            # The parent's join needs no query for what is known here (a cancelled child's
            # row may say it was fired: read then).
            if only_child and run.status != RunStatus.CANCELLED:
                self._outcomes[(run.parent_id, run.parent_step_key)] = self._outcome(run)
        return written, run.parent_id

    def _defer_end(
        self,
        run: RunView,
        parent: RunView,
        steps: list[StepRecord],
        items: list[tuple[str, dict]],
        now: Any,
    ) -> str:
        """End an only child by holding its write back to go with the next write of its
        parent, which this worker left waiting on it and goes on with as it left it: one
        transaction instead of two (see `_transaction`). Nothing outside the database
        happens in between: a model or tool call, a read, or the parent's turn ending writes
        the child's end first (`_flush`)."""

        def write() -> None:  # its events and step records go with the transaction's own
            self._write_run(
                run,
                completed_at=now,
                execution_time_ms=int((now - run.began_at).total_seconds() * 1000),
                lease_owner="",
                lease_expires_at=None,
            )
            self._record_metrics(run, now)

        self._deferred = _Deferred(child=run, parent=parent, write=write, items=items, steps=steps)
        self._taken[parent.id] = parent.changed(
            released=False,
            pending_steps=[],
            pending_events=Events(),
            resumed=False,
            cancel_fresh=True,
            memory=None,  # read again, as by a claim
            row_json=dict(parent.row_json),
        )
        self._outcomes[(parent.id, run.parent_step_key)] = self._outcome(run)
        return parent.id

    @staticmethod
    def _record_metrics(run: RunView, now: Any) -> None:
        """The run's custom metrics (runs/metrics.py), in its end's transaction: one
        statement, and none for an entity that declares no custom metric."""
        rows = custom_metric_rows(
            definition=run.definition,
            output=run.output,
            run_id=run.id,
            workspace_id=run.workspace_id,
            entity_id=run.entity_id,
            now=now,
        )
        if rows:
            sql.insert(RunMetric, rows, conflict=("run", "name"), update=("value", "recorded_at"))

    @staticmethod
    def _outcome(run: RunView) -> ChildOutcome:
        """A child's outcome as its parent's join reads it, from the child's own view."""
        return ChildOutcome(
            run_id=run.id,
            step_key=run.parent_step_key.rsplit("#", 1)[0],
            status=run.status,
            output=run.output,
            error_code=run.error_code,
            error_message=run.error_message[:10_000],
            entity_name=run.definition["identity"]["name"],
        )

    # -- people -----------------------------------------------------------------------------

    def _approval_verdict(self, run: RunView, key: str) -> hitl.ApprovalVerdict | None:
        self._flush(run)  # a held-back child's end first
        row = self.approvals.decided(run_id=run.id, key=key)
        if row is None:
            return None
        return hitl.ApprovalVerdict(
            status=row.status,
            outcome=hitl.outcome_of(row.status, row.decision, row.timeout_action, row.escalated),
            payload=self.pii.opened(row.approved_payload),
            notes=row.reviewer_notes,
            constraint=row.locked_constraint,
            decided_by=row.decided_by,
        )

    def _request_approval(self, run: RunView, pause: ports.Pause) -> RunView:
        ask, steps, events = pause.ask, pause.steps, pause.events
        self._flush(run)  # a held-back child's end first
        now = self.clock.now()
        priced = hitl.priced(ask, _facts(run, now))
        request = ApprovalRequest(
            run_id=run.id,
            workspace_id=run.workspace_id,
            entity_id=run.entity_id,
            trace_id=run.trace_id,
            ask=ask,
            # What a person reads, and may edit and send back to the engine: sealed.
            sealed=self.pii.sealed(run.definition, hitl.readable(ask)),
            risk_level=priced.level,
            risk_factors=priced.factors,
            cost_estimate=priced.estimate,
            time_to_complete=priced.time_left,
            now=now,
        )
        required = ask.approval_required
        summary = self.pii.kept(run.definition, ask.reasoning_summary)
        event = hitl.approval_event(ask, priced.level, summary)
        with transaction.atomic():
            event[1]["approval_id"] = self.approvals.request(request)
            if not required:
                return run.noted(event[0], **event[1])
            run, steps, items = take_pending(run, steps, [*events.items, event])
            append_events(run.trace_id, run.id, self._kept_items(run, items))
            written = self._write_run(run, lease_owner="", lease_expires_at=None)
            self._write_steps(run, steps)
        return written.changed(released=True)

    def _awaiting_person(self, run: RunView) -> bool:
        self._flush(run)  # a held-back child's end first
        return self.approvals.any_open(trace_id=run.trace_id)

    def _record_judge(self, run: RunView, key: str, verdict: dict) -> None:
        self._flush(run)  # a held-back child's end first
        rationale = self.pii.kept(run.definition, str(verdict.get("rationale", "")))
        self.approvals.judge_record(
            run_id=run.id, key=key, verdict={**verdict, "rationale": rationale}
        )

    # -- calls ----------------------------------------------------------------------------------

    def _recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None:
        self._flags_seen = {}  # a call goes out: the flags may change while it is out
        if self._held_spawn is None:  # a model call may go before a held start, not an end
            self._flush(run)
        if not run.resumed:
            return None
        row = LLMCall.objects.filter(call_key=call_key).first()
        if row is None:
            return None
        meta = row.metadata or {}
        return ModelReply(
            content=row.output_response,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            cost_usd=row.cost_usd,
            latency_ms=row.latency_ms,
            provider=row.model_provider,
            model=row.model_name,
            parsed=meta.get("parsed"),
            tool_name=meta.get("tool_name"),
            tool_arguments=meta.get("tool_arguments"),
            tool_calls=tuple(meta.get("tool_calls") or ()),
        )

    def _record_model_call(self, run: RunView, call: ports.ModelCall) -> RunView:
        step, call_key, request, reply = call.step, call.key, call.request, call.reply
        reserved = call.reserved
        prompt = "\n\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in request.messages)
        tokens = reply.prompt_tokens + reply.completion_tokens
        self._read_back.clear()
        run, steps, items = take_pending(run, [], [payloads.llm_call(step, reply)])
        try:
            run = self._record_call(
                run, step, call_key, request, reply, prompt, tokens, steps, items, reserved
            )
        except IntegrityError:
            if not LLMCall.objects.filter(call_key=call_key).exists():
                raise  # a row the database refuses: a bug to end the run with, not a race
            # The same call was recorded by a worker that took the run over: this one is late.
            raise LeaseLost(f"run {run.id}: another worker recorded {call_key}") from None
        return self._as_read(run)

    def _record_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
        prompt: str,
        tokens: int,
        steps: list[StepRecord],
        items: list[tuple[str, dict]],
        reserved: Decimal | None,
    ) -> RunView:
        cost = to_micros(reply.cost_usd)  # as the cost columns keep it, everywhere alike
        metadata = {
            "step": step.key,
            "iteration": step.iteration,
            "attempt": step.attempt,
            "parsed": reply.parsed,
            "tool_name": reply.tool_name,
            "tool_arguments": reply.tool_arguments,
        }
        if reply.tool_calls:  # a reasoning loop's turn: every call it made, for a replay
            metadata["tool_calls"] = list(reply.tool_calls)
        with self._transaction(run, items=items, steps=steps):
            if steps or len(items) > 1:  # the engine buffered changes of the run too
                run = self._write_run(run)
            # The call's unique key stops a late worker here; the counters' write checks the
            # lease. One statement: the record goes in with the counters.
            record = sql.insert_statement(
                LLMCall,
                [
                    {
                        "id": uuid.uuid4(),
                        "run": run.id,
                        "call_key": call_key,
                        "purpose": request.purpose,
                        "timestamp": self.clock.now(),
                        "model_provider": reply.provider[:50],
                        "model_name": reply.model[:100],
                        "input_prompt": prompt,
                        "output_response": reply.content,
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": tokens,
                        "cost_usd": cost,
                        "latency_ms": reply.latency_ms,
                        "temperature": request.temperature,
                        "reasoning_mode": request.reasoning_mode,
                        "metadata": metadata,
                    }
                ],
            )
            # Ancestors' rows after the trace's sequence row: every transaction that touches
            # both takes them in this order, so siblings on two workers cannot deadlock.
            self._count(
                run, cost=cost, tokens=tokens, llm_calls=1, reserved=reserved, record=record
            )
        return run

    def _recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None:
        self._flags_seen = {}  # a call goes out: the flags may change while it is out
        self._flush(run)  # a held-back child's end first
        if not run.resumed:
            return None
        row = ToolCall.objects.filter(idempotency_key=key, success=True).first()
        if row is None:
            return None
        return ToolResult(output=row.output_result, latency_ms=row.latency_ms, replayed=True)

    def _record_tool_call(self, run: RunView, call: ports.ToolCall) -> RunView:
        step, invocation, result, error = call.step, call.invocation, call.result, call.error
        reserved = call.reserved
        tool = invocation.tool
        self._read_back.clear()
        run, steps, items = take_pending(run, [], [payloads.tool_call(step, invocation, result)])
        with self._transaction(run, items=items, steps=steps):
            if steps or len(items) > 1:  # the engine buffered changes of the run too
                run = self._write_run(run)
            # Upserted: a replay after a crash may write the same key again. With the counters.
            record = sql.insert_statement(
                ToolCall,
                [
                    {
                        "id": uuid.uuid4(),
                        "idempotency_key": invocation.idempotency_key,
                        "run": run.id,
                        "timestamp": self.clock.now(),
                        "tool_id": tool["tool_id"],
                        "tool_name": tool.get("name", tool["tool_id"])[:200],
                        "provider": tool.get("provider", "")[:50],
                        "input_parameters": invocation.arguments,
                        "output_result": result.output if result else None,
                        "success": result is not None,
                        "error_message": error[:10_000],
                        "latency_ms": result.latency_ms if result else 0,
                        "metadata": {
                            "step": step.key,
                            "iteration": step.iteration,
                            "attempt": step.attempt,
                            "sandbox": invocation.sandbox,
                        },
                    }
                ],
                conflict=("idempotency_key",),
                update=("output_result", "success", "error_message", "latency_ms"),
            )
            # After the trace's sequence row, as in _record_call; fenced on the lease.
            self._count(run, tool_calls=1, reserved=reserved, record=record)
        return self._as_read(run)

    # -- memory and artifacts --------------------------------------------------------------

    def _memory_read(self, query: ports.MemoryQuery) -> list[Any]:
        """The scope's items, newest first, not expired, at most `query.limit` (and the
        oldest too, `with_oldest`, when the limit left it out)."""
        items = _memory_live(query.scope, query.now)
        if query.limit is None:
            return [self.pii.opened(item) for item in items.values_list("content", flat=True)]
        read = list(items.values_list("pk", "content")[: query.limit])
        if query.with_oldest and len(read) == query.limit:
            oldest = items.order_by("created_at", "id").values_list("pk", "content").first()
            if oldest is not None and oldest[0] not in {pk for pk, _ in read}:
                read.append(oldest)
        return [self.pii.opened(content) for _, content in read]

    def _memory_entries(self, query: ports.MemoryEntries) -> list[ports.MemoryEntry]:
        """The scope's items with their ids, newest first, not expired, past `query.skip`."""
        items = _memory_live(query.scope, query.now).values_list("pk", "content")[query.skip :]
        return [ports.MemoryEntry(pk, self.pii.opened(content)) for pk, content in items]

    def _memory_write(self, run: RunView, item: ports.Remembered) -> None:
        """Keep one item (once per run), then only the scope's newest `item.keep`."""
        self._flush(run)  # what is held back first: the item names the run
        with transaction.atomic():
            if _memory_items(item.scope).filter(run_id=run.id).exists():
                return  # the run's end replayed after a crash: its item is kept already
            MemoryItem.objects.create(
                workspace_id=item.scope.workspace_id,
                scope=item.scope.scope,
                entity_id=item.scope.entity_id,
                session=item.scope.session,
                run_id=run.id,
                content=self.pii.sealed(run.definition, item.content),
                expires_at=item.expires_at,
            )
            _memory_keep(item.scope, item.keep)

    def _memory_fold(self, run: RunView, fold: ports.MemoryFolded) -> None:
        """`fold.into` takes the summary and `fold.others` go, all or nothing (a conditional
        write: a fold that lost the race to another run's changes nothing); then only the
        scope's newest `fold.keep` stay."""
        self._flush(run)
        with transaction.atomic():
            if fold.into is not None:
                scope = _memory_items(fold.scope)
                wanted = {fold.into, *fold.others}
                # Locked: of two runs folding the same items, the second finds them gone.
                found = scope.filter(pk__in=wanted).select_for_update().values_list("pk")
                if len(found) == len(wanted):
                    content = self.pii.sealed(run.definition, fold.content)
                    scope.filter(pk=fold.into).update(content=content)
                    scope.filter(pk__in=fold.others).delete()
            _memory_keep(fold.scope, fold.keep)

    def artifacts(self, run: RunView) -> _WorkspaceArtifacts:
        return _WorkspaceArtifacts(run.workspace_id)

    def _child_definition(self, run: RunView, entity_ref: str) -> dict | None:
        found = self._resolved(run, entity_ref)
        return pinned_definition(found[1].pk, found[0].pk) if found else None

    def definitions(self, run: RunView, refs: list[str]) -> dict[str, dict]:
        self._resolve_many(run, refs)
        found = {}
        for ref in refs:
            definition = self._child_definition(run, ref)
            if definition is not None:
                found[ref] = definition
        return found

    def child_versions(self, run: RunView, ref: str) -> list[str] | None:
        entities = Entity.objects.filter(workspace_id=run.workspace_id)
        named = Q(external_id=ref) | Q(name=ref)
        with contextlib.suppress(ValueError):
            named |= Q(pk=uuid.UUID(str(ref)))
        entity_id = entities.filter(named).values_list("pk", flat=True).first()
        if entity_id is None:
            return None
        return [version for _, version in _pinned_versions(run.trace_id, [entity_id])[entity_id]]

    def _resolved(self, run: RunView, ref: str) -> tuple[_Child, _Version] | None:
        """A child entity and the version the run's trace pinned, resolved once per advance."""
        self._resolve_many(run, [ref])
        return self._children[_child_key(run, ref)]

    def _resolve_many(self, run: RunView, refs: list[str]) -> None:
        """Resolve child references (id, string id or name) to entities and the versions the
        run's trace pinned when its root started, in one query, and read the definitions
        not cached yet. The pin is the root's start: each entity's newest version saved by
        then (versions never change; a later save is a new version the trace never sees);
        the newest there is for an entity that had none then (made again since). A link
        that names a version or a range (runs/engine/versions.py) takes the newest version
        saved by then that it allows: one more query, for those links' versions only."""
        workspace_id = run.workspace_id
        cache = self.__dict__.setdefault("_children", {})
        keys = {ref: _child_key(run, ref) for ref in dict.fromkeys(refs)}
        missing = [ref for ref, key in keys.items() if key not in cache]
        if not missing:
            return
        ids = []
        for ref in missing:
            with contextlib.suppress(ValueError):
                ids.append(uuid.UUID(str(ref)))
        # One query: the entities and the id of each one's pinned version.
        table = sql.quote(Entity._meta.db_table)
        versions_table = sql.quote(EntityVersion._meta.db_table)
        runs_table = sql.quote(Run._meta.db_table)
        by_id = f"{table}.id IN ({sql.marks(ids)}) OR " if ids else ""
        found = sql.select(
            Entity,
            ("id", "external_id", "name", "type", "status"),
            f"workspace_id = %s AND ({by_id}external_id IN ({sql.marks(missing)}) "
            f"OR name IN ({sql.marks(missing)}))",
            [
                sql.run_id_param(run.trace_id),
                workspace_id,
                *(sql.prep(Entity, "id", value) for value in ids),
                *map(str, missing),
                *map(str, missing),
            ],
            extra=(
                f"COALESCE((SELECT v.id FROM {versions_table} v WHERE v.entity_id = {table}.id "  # noqa: S608
                f"AND v.created_at <= (SELECT r.created_at FROM {runs_table} r WHERE r.id = %s) "
                "ORDER BY v.created_at DESC, v.id DESC LIMIT 1), "
                f"(SELECT v.id FROM {versions_table} v WHERE v.entity_id = {table}.id "
                "ORDER BY v.created_at DESC, v.id DESC LIMIT 1))"
            ),
        )
        entities = [_Child(pk=values.pop("id"), **values) for values, _ in found]
        versions = {
            entity.pk: _Version(pk=newest, entity_id=entity.pk)
            for entity, (_, (newest,)) in zip(entities, found, strict=True)
            if newest is not None
        }
        by_ref: dict[str, _Child] = {}
        for entity in entities:
            for key in (str(entity.pk), entity.external_id, entity.name):
                if key:
                    by_ref.setdefault(key, entity)
        named: dict[str, _Child | None] = {}
        for ref in missing:
            entity = by_ref.get(str(ref))
            if entity is None:
                try:
                    entity = by_ref.get(str(uuid.UUID(str(ref))))
                except ValueError:
                    entity = None
            named[ref] = entity
        ranged = {
            ref: entity
            for ref, entity in named.items()
            if entity is not None and keys[ref][2] is not None
        }
        chosen = _ranged_versions(
            run.trace_id, {ref: (entity, keys[ref][2]) for ref, entity in ranged.items()}
        )
        only_ranged = {entity.pk for entity in ranged.values()} - {
            entity.pk for ref, entity in named.items() if entity and ref not in ranged
        }
        _cache_definitions(
            [v for pk, v in versions.items() if pk not in only_ranged]
            + [v for v in chosen.values() if v is not None]
        )
        for ref, entity in named.items():
            if ref in ranged:
                version = chosen[ref]
            else:
                version = versions.get(entity.pk) if entity is not None else None
            cache[keys[ref]] = (entity, version) if version is not None else None


def _child_key(run: RunView, ref: str) -> tuple[str, str, str | None]:
    """How a child reference's resolution is cached: the trace, the reference and the range
    of the run's link to it (two parents in one trace may ask for different versions)."""
    return (run.trace_id, ref, link_ranges(run.definition).get(ref))


def _pinned_versions(trace_id: str, entity_ids: list[Any]) -> dict[Any, list[tuple[int, str]]]:
    """The (id, version) of each entity's versions saved by the trace's pin (its root's
    start), in the order they were saved; all of them for an entity that had none then
    (made again since), as the pin of an unranged link falls back to the newest. One query."""
    root = Run.objects.filter(pk=trace_id).values("created_at")[:1]
    rows = (
        EntityVersion.objects.filter(entity_id__in=entity_ids)
        .annotate(
            by_pin=ExpressionWrapper(Q(created_at__lte=Subquery(root)), output_field=BooleanField())
        )
        .order_by("created_at", "id")
        .values_list("id", "entity_id", "version", "by_pin")
    )
    saved: dict[Any, list[tuple[int, str]]] = {pk: [] for pk in entity_ids}
    then: dict[Any, list[tuple[int, str]]] = {pk: [] for pk in entity_ids}
    for pk, entity_id, version, by_pin in rows:
        saved.setdefault(entity_id, []).append((pk, version))
        if by_pin:
            then.setdefault(entity_id, []).append((pk, version))
    return {entity_id: then.get(entity_id) or rows_ for entity_id, rows_ in saved.items()}


def _ranged_versions(
    trace_id: str, wanted: dict[str, tuple[_Child, str]]
) -> dict[str, _Version | None]:
    """For each reference whose link names a range: the newest version of its entity saved
    by the pin that the range allows, or None when none does."""
    if not wanted:
        return {}
    pinned = _pinned_versions(trace_id, list({entity.pk for entity, _ in wanted.values()}))
    chosen: dict[str, _Version | None] = {}
    for ref, (entity, text) in wanted.items():
        saved = pinned.get(entity.pk, [])
        version = newest_matching(text, [v for _, v in saved])
        ids = [pk for pk, v in saved if v == version]  # of equal versions, the last saved
        chosen[ref] = _Version(pk=ids[-1], entity_id=entity.pk) if ids else None
    return chosen


def _cache_definitions(versions: list[_Version]) -> None:
    """Read the definitions of `versions` not in the process-wide cache yet, in one query."""
    uncached = [v.pk for v in versions if (v.pk, str(v.entity_id)) not in _DEFINITIONS]
    if not uncached:
        return
    rows = sql.select(
        EntityVersion,
        ("id", "entity", "definition"),
        f"id IN ({sql.marks(uncached)})",
        [sql.prep(EntityVersion, "id", pk) for pk in uncached],
    )
    with _DEFINITIONS_LOCK:
        for values, _ in rows:
            _DEFINITIONS[(values["id"], str(values["entity"]))] = pinned.shared(
                values["definition"]
            )
        while len(_DEFINITIONS) > _DEFINITIONS_KEPT:
            _DEFINITIONS.popitem(last=False)


@dataclass(slots=True)
class _Child:
    """A child entity as a spawn needs it (resolved by `_resolve_many`)."""

    pk: Any
    external_id: str | None
    name: str
    type: str
    status: str


@dataclass(slots=True)
class _Version:
    """The current version of a child entity (its definition: `pinned_definition`)."""

    pk: int
    entity_id: Any


@dataclass
class _HeldSpawn:
    """A parent's start of its only child held back to go with the child's first write."""

    parent: RunView
    child: RunView
    write: Callable[[], None]  # the parent's write of the spawn, inside a transaction
    items: list[tuple[str, dict]]  # the parent's events, in the transaction's first statement
    steps: list[StepRecord]  # the parent's step records, in the transaction's last

    @property
    def child_id(self) -> str:
        return self.child.id


@dataclass
class _Unwritten:
    """The row of a held start's child, before it goes in."""

    run_id: str
    row: dict[str, Any]
    parent: RunView  # whose write in the same transaction reads back the flag the row takes


@dataclass
class _Deferred:
    """An only child's end held back to go with its parent's next write."""

    child: RunView
    parent: RunView  # as this worker left it waiting
    write: Callable[[], None]  # the child's end, inside a transaction
    items: list[tuple[str, dict]]  # the child's events, in the transaction's first statement
    steps: list[StepRecord]  # the child's step records, in the transaction's last

    def terms(self, now: datetime) -> sql.Claim:
        """The parent as this worker left it waiting, to take its lease on at `now` (the
        store's clock)."""
        return sql.Claim(
            now=now,
            until=now + lease_time(),
            cursor=self.parent.cursor,
            iteration=self.parent.iteration,
            attempt=self.parent.attempt,
            deadline=self.parent.deadline,
        )

    def claim(self, owner: str, now: datetime) -> None:
        sql.claim_waiting(self.parent.id, owner, self.terms(now))


class _Heartbeat:
    """Renews the leases of the runs this process is busy with (a slow model call must not let
    the sweeper hand a run to a second worker), every third of the lease, from one daemon
    thread per process: registering a run costs a dictionary entry, not a thread."""

    _held: dict[str, str] = {}  # run id -> lease owner
    _lock = threading.Lock()
    _thread: threading.Thread | None = None

    @classmethod
    def start(cls, run: RunView, owner: str) -> None:
        with cls._lock:
            cls._held[run.id] = owner
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(
                    target=cls._beat, name="hierarch-leases", daemon=True
                )
                cls._thread.start()

    @classmethod
    def stop(cls, run: RunView) -> None:
        with cls._lock:
            cls._held.pop(run.id, None)

    @classmethod
    def _beat(cls) -> None:
        while True:
            time.sleep(max(lease_seconds() / 3, 0.5))
            with cls._lock:
                held = list(cls._held.items())
            # Nothing may end this thread: a missed beat only shortens a lease. (Its
            # connection goes as the settings say, at once with no DB_CONN_MAX_AGE, not kept
            # idle for the process's life once no run is busy.)
            with contextlib.suppress(Exception):
                close_old_connections()
            if held:
                until = timezone.now() + timedelta(seconds=lease_seconds())
                for run_id, owner in held:
                    with contextlib.suppress(Exception):
                        Run.objects.filter(pk=run_id, lease_owner=owner).update(
                            lease_expires_at=until
                        )
                with contextlib.suppress(Exception):
                    close_old_connections()


def _memory_items(scope: ports.MemoryScope) -> Any:
    """The items of a memory scope (newest first, as MemoryItem's ordering says)."""
    items = MemoryItem.objects.filter(workspace_id=scope.workspace_id, scope=scope.scope)
    if scope.scope == "SESSION":
        return items.filter(session=scope.session)
    if scope.scope == "ENTITY":
        return items.filter(entity_id=scope.entity_id)
    return items


def _memory_live(scope: ports.MemoryScope, now: Any) -> Any:
    """The items of a memory scope not expired at `now` (newest first)."""
    return _memory_items(scope).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def _memory_keep(scope: ports.MemoryScope, keep: int | None) -> None:
    """Only the scope's newest `keep` items stay (all, without `keep`)."""
    if keep:
        kept = _memory_items(scope).values_list("pk", flat=True)[:keep]
        _memory_items(scope).exclude(pk__in=list(kept)).delete()


class _WorkspaceArtifacts:
    """The engine's ArtifactStore on the Artifact table, per workspace."""

    def __init__(self, workspace_id: int):
        self.workspace_id = workspace_id

    def has(self, digest: str) -> bool:
        return Artifact.objects.filter(workspace_id=self.workspace_id, digest=digest).exists()

    def put(self, digest: str, content: str) -> None:
        Artifact.objects.get_or_create(
            workspace_id=self.workspace_id,
            digest=digest,
            defaults={"content": content, "size": len(content.encode())},
        )

    def get(self, digest: str) -> str | None:
        return (
            Artifact.objects.filter(workspace_id=self.workspace_id, digest=digest)
            .values_list("content", flat=True)
            .first()
        )


_VIEW_FIELDS = (  # what `claim` reads back; a foreign key gives the related row's id
    "id",
    "trace_id",
    "workspace",
    "entity_version",
    "entity",
    "status",
    "input_data",
    "state",
    "dynamic_plan",
    "cursor",
    "iteration",
    "attempt",
    "depth",
    "depth_limit",
    "parent",
    "output_data",
    "error_code",
    "error_message",
    "cancel_requested",
    "lineage",
    "parent_step_key",
    "spawn_group",
    "started_at",
    "created_at",
    "created_by",
    "resumed",
    "deadline_at",
    "budget_anchor",
    "limited",
    "trial",
    "sandbox",
    "passes_granted",
    "webhook_url",
    "export_trace_id",
)
_ASLEEP = (RunStatus.PAUSED, RunStatus.BLOCKED)
_PARENTS_CANCEL_FLAG = (
    f"(SELECT p.cancel_requested FROM {sql.quote(Run._meta.db_table)} p WHERE p.id = %s)"  # noqa: S608
)
_STEP_DONE = ("COMPLETED", "FAILED", "SKIPPED", "CANCELLED")
_CHILD_FIELDS = (
    "id",
    "status",
    "output_data",
    "error_code",
    "error_message",
    "parent_step_key",
    "group_index",
    "fired_reason",
)
# A child run's columns that its spawn leaves at their defaults.
_NEW_RUN = {
    "span_id": "",
    "status": RunStatus.PENDING,
    "context": {},
    "output_data": None,
    "state": {},
    "dynamic_plan": None,
    "cursor": 0,
    "iteration": 1,
    "attempt": 1,
    "error_code": "",
    "error_message": "",
    "started_at": None,
    "completed_at": None,
    "execution_time_ms": None,
    "total_cost_usd": Decimal(0),
    "total_tokens": 0,
    "llm_calls": 0,
    "tool_calls": 0,
    "lease_owner": "",
    "lease_expires_at": None,
    "wake_at": None,
    "resumed": False,
    "reserved_usd": Decimal(0),
}
_STEP_UPDATED = (
    "position",
    "name",
    "type",
    "status",
    "input",
    "output",
    "error_code",
    "error_message",
    "finished_at",
)
