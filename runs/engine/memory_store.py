"""The engine's RunStore in plain dicts: the engine's own fast tests, no database.

It keeps the ORM store's (`runs/store.py`) semantics, so one contract suite
(`tests/engine/test_store_contract.py`) runs against both: `claim` answers None for a run that
is finished, asleep, leased by another owner or due later, and says `resumed` when a lease
was left behind; every write takes the records the engine buffered on the run first; a
finishing child answers its parent's id when it was the last unfinished child of the
parent's step; only the lease holder writes (`LeaseLost` otherwise); model and tool calls
are kept by key and counted for the run and every ancestor; events get the trace's next
numbers. Time (the engine's kind of clock: an aware datetime) and ids are injected; one lock
makes it safe to share between threads. JSON values are copied through JSON, as a database column
would, so the engine never shares a mutable object with the store (pinned definitions
excepted: they are never changed, as in the ORM store's process-wide cache).
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from cryptography.fernet import Fernet

from runs.engine import hitl, versions
from runs.engine import state as payloads
from runs.engine.context import InMemoryArtifactStore
from runs.engine.definition import Definition
from runs.engine.hiring import fired_with, hired_fields
from runs.engine.limits import (
    QUOTA_HELD_KEY,
    LimitReached,
    LimitRow,
    budget_blocks,
    first_limit_hit,
    hired_limits,
    lifetime_left,
    lifetime_limit,
    lifetime_used,
    month_start,
    no_room_for_children,
    quota_hold,
    quota_refused,
    quota_room,
    run_limits,
)
from runs.engine.observability import child_export_trace, events_kept
from runs.engine.pii_copies import PiiCopies
from runs.engine.ports import (
    MAX_PASSES_EXHAUSTED,
    Cipher,
    Committed,
    Finish,
    Ids,
    LeaseLost,
    MemoryEntries,
    MemoryEntry,
    MemoryFolded,
    MemoryQuery,
    MemoryScope,
    ModelCall,
    ModelReply,
    ModelRequest,
    Pause,
    RandomIds,
    Remembered,
    Save,
    Schedule,
    Screening,
    Spawn,
    ToolCall,
    ToolResult,
    Transition,
)
from runs.engine.state import (
    TERMINAL,
    ChildOutcome,
    ChildRequest,
    Event,
    RunView,
    StepRecord,
    child_step_key,
    take_pending,
)
from runs.engine.storage import DispatchingStore
from runs.engine.tree import descendants

ACTIVE = ("PENDING", "RUNNING", "WAITING", "PAUSED")  # what a cancellation stops
ASLEEP = ("PAUSED", "BLOCKED")  # nothing advances these until a human acts
STEP_DONE = ("COMPLETED", "FAILED", "SKIPPED", "CANCELLED")
MESSAGE_LIMIT = 10_000
_MICRO = Decimal("0.000001")  # the ORM's cost columns keep six decimal places

Now = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class StoredEntity:
    ref: str
    definition: Definition
    status: str
    workspace_id: int

    @property
    def name(self) -> str:
        return str(self.definition["identity"]["name"])

    @property
    def type(self) -> str:
        return str(self.definition["metadata"]["type"])

    @property
    def version(self) -> str:
        return str(self.definition["metadata"].get("version") or "1.0.0")


@dataclass
class StoredRun:
    """A run as the ORM's Run row holds it."""

    id: str
    trace_id: str
    workspace_id: int
    entity_ref: str
    definition: Definition  # the entity's definition when the run was created (pinned)
    input: Any
    created_at: datetime
    depth_limit: int
    parent_id: str | None = None
    parent_step_key: str = ""
    spawn_group: str = ""
    group_index: int = 0
    depth: int = 0
    lineage: list[str] = field(default_factory=list)
    status: str = "PENDING"
    context: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    plan: list[dict[str, Any]] | None = None
    cursor: int = 0
    iteration: int = 1
    attempt: int = 1
    output: Any = None
    error_code: str = ""
    error_message: str = ""
    created_by_id: Any = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    execution_time_ms: int | None = None
    total_cost_usd: Decimal = Decimal(0)
    total_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    wake_at: datetime | None = None
    cancel_requested: bool = False
    deadline_at: datetime | None = None
    max_llm_calls: int | None = None
    max_tool_calls: int | None = None
    budget_usd: Decimal | None = None
    reserved_usd: Decimal = Decimal(0)
    budget_anchor: str | None = None
    limited: bool = False
    cost_alert_usd: Decimal | None = None
    trial: bool = False
    sandbox: bool = False
    passes_granted: int = 0
    export_trace_id: str | None = None  # its trace outside Hierarch, when not trace_id
    # A hired subordinate's record (runs/engine/hiring.py), and its firing.
    role: str | None = None
    task: str | None = None
    hired_reason: str | None = None
    hired_by: str | None = None
    fired_reason: str | None = None
    fired_by: str | None = None


@dataclass
class StoredStep:
    run_id: str
    key: str
    iteration: int
    attempt: int
    position: int
    name: str
    type: str
    status: str
    input: Any
    output: Any
    error_code: str
    error_message: str
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class StoredEvent:
    trace_id: str
    seq: int
    run_id: str
    type: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class StoredModelCall:
    call_key: str
    run_id: str
    step: str
    iteration: int
    attempt: int
    request: ModelRequest
    reply: ModelReply


@dataclass
class StoredToolCall:
    idempotency_key: str
    run_id: str
    tool_id: str
    tool_name: str
    arguments: Any
    output: Any
    success: bool
    error_message: str
    latency_ms: int
    step: str
    iteration: int
    attempt: int
    sandbox: bool


@dataclass
class StoredMemory:
    id: int
    workspace_id: int
    scope: str
    entity_id: str | None
    session: str | None
    run_id: str
    content: Any
    created_at: datetime
    expires_at: datetime | None


@dataclass
class StoredApproval:
    run_id: str
    ask: hitl.ApprovalAsk
    status: str
    risk_level: str
    risk_factors: list[str]
    cost_estimate: dict[str, Any]
    requested_at: datetime
    decision: str = ""
    payload: Any = None
    notes: str = ""
    constraint: dict[str, Any] | None = None
    decided_by: str = ""
    escalated: bool = False


class _World:
    """The data every worker's view of the store shares."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entities: dict[tuple[int, str], StoredEntity] = {}
        # The entities as each trace's root found them when it started (as the ORM store's
        # children resolve to the versions saved by then): a definition saved later is a
        # new version its runs never see.
        self.pins: dict[str, dict[tuple[int, str], StoredEntity]] = {}
        # Every definition each entity was saved with, oldest first (its versions), and as
        # each trace's root found them: a link with a range takes the newest it allows.
        self.history: dict[tuple[int, str], tuple[StoredEntity, ...]] = {}
        self.pinned_history: dict[str, dict[tuple[int, str], tuple[StoredEntity, ...]]] = {}
        self.runs: dict[str, StoredRun] = {}
        self.steps: dict[tuple[str, str, int, int], StoredStep] = {}
        self.events: dict[str, list[StoredEvent]] = {}
        self.model_calls: dict[str, StoredModelCall] = {}
        self.tool_calls: dict[str, StoredToolCall] = {}
        self.memory: list[StoredMemory] = []
        self.memory_ids = itertools.count(1)
        self.artifacts: dict[int, InMemoryArtifactStore] = {}
        self.approvals: dict[tuple[str, str], StoredApproval] = {}
        self.judges: dict[tuple[str, str], dict[str, Any]] = {}
        # Each workspace's monthly cost quota (as the Workspace row's), and what hires with
        # budgets of their own hold of it while they run; a workspace not here has none.
        self.quotas: dict[int, Decimal] = {}
        self.quota_held: dict[int, Decimal] = {}
        # pii_handling's key when none is given: the ORM store always has the vault's.
        self.cipher = _WorldCipher()


class _WorldCipher:
    """A key of the world's own, for sealing what the engine reads back (as the vault's)."""

    def __init__(self) -> None:
        self._fernet = Fernet(Fernet.generate_key())

    def encrypt(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode()

    def decrypt(self, token: str) -> str:
        return self._fernet.decrypt(token.encode()).decode()


class InMemoryRunStore(DispatchingStore):
    """A RunStore on dicts. `worker(owner)` is another lease owner on the same data, as each
    of the ORM store's instances is."""

    def __init__(
        self,
        *,
        screening: Screening,
        clock: Now = utc_now,
        owner: str = "memory-worker",
        lease_seconds: float = 30.0,
        workspace_id: int = 1,
        ids: Ids | None = None,
        cipher: Cipher | None = None,
        _world: _World | None = None,
    ):
        """`screening` and `cipher`: pii_handling's (`cipher` a key of the store's own when
        None); every copy of a run's data this store keeps goes through `self.pii`, as in
        the ORM store."""
        self.clock = clock
        self._world = _world or _World()
        self.pii = PiiCopies(screening, self._world.cipher if cipher is None else cipher)
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.workspace_id = workspace_id
        self.ids = ids or RandomIds()
        self._taken: set[str] = set()  # runs leased to this worker by spawn/finish (adopt)

    def worker(self, owner: str) -> InMemoryRunStore:
        """The same data under another lease owner."""
        return InMemoryRunStore(
            screening=self.pii.screening,
            clock=self.clock,
            owner=owner,
            lease_seconds=self.lease_seconds,
            workspace_id=self.workspace_id,
            ids=self.ids,
            cipher=self.pii.cipher,
            _world=self._world,
        )

    # -- the world outside the engine -------------------------------------------------------

    def add_entity(
        self,
        ref: str,
        definition: Definition,
        status: str = "ACTIVE",
        *,
        workspace_id: int | None = None,
    ) -> None:
        """Save an entity's current definition (a new version when `ref` exists: runs started
        before keep theirs). Children are resolved by this reference or the entity's name."""
        workspace = self.workspace_id if workspace_id is None else workspace_id
        with self._world.lock:
            entity = StoredEntity(ref, copy.deepcopy(definition), status, workspace)
            self._world.entities[(workspace, ref)] = entity
            key = (workspace, ref)
            self._world.history[key] = (*self._world.history.get(key, ()), entity)

    def set_monthly_cost_quota(
        self, quota_usd: Decimal | None, *, workspace_id: int | None = None
    ) -> None:
        """Set (None: remove) the workspace's monthly cost quota, which each hire is checked
        against (as a Workspace row's `monthly_cost_quota_usd`)."""
        workspace = self.workspace_id if workspace_id is None else workspace_id
        with self._world.lock:
            if quota_usd is None:
                self._world.quotas.pop(workspace, None)
            else:
                self._world.quotas[workspace] = Decimal(quota_usd)

    def quota_held(self, workspace_id: int | None = None) -> Decimal:
        """What hires under way hold of the workspace's monthly cost quota."""
        workspace = self.workspace_id if workspace_id is None else workspace_id
        return self._world.quota_held.get(workspace, Decimal(0))

    def forget_version(self, ref: str, version: str, *, workspace_id: int | None = None) -> None:
        """Drop the saved definitions of `version` of an entity from its history, and from
        every trace's pin of it (as a deleted version row would be, for the ORM store)."""
        key = (self.workspace_id if workspace_id is None else workspace_id, ref)
        with self._world.lock:
            for histories in (self._world.history, *self._world.pinned_history.values()):
                if key in histories:
                    histories[key] = tuple(e for e in histories[key] if e.version != version)
            pins = [(self._world.entities, self._world.history)] + [
                (entities, self._world.pinned_history[trace_id])
                for trace_id, entities in self._world.pins.items()
            ]
            for entities, history in pins:
                kept = history.get(key, ())
                if key in entities and entities[key].version == version and kept:
                    entities[key] = kept[-1]

    def start(
        self,
        entity_ref: str,
        input: Any,
        *,
        workspace_id: int | None = None,
        created_by_id: Any = None,
        context: dict[str, Any] | None = None,
        trial: bool = False,
        sandbox: bool = False,
    ) -> str:
        """Create a root run of the entity's current definition (as `run_start` does, with its
        `run.created` event); answer its id. Nothing advances it: hint the engine."""
        workspace = self.workspace_id if workspace_id is None else workspace_id
        with self._world.lock:
            entity = self._resolve(workspace, entity_ref)
            if entity is None:
                raise KeyError(f"no entity {entity_ref!r} in workspace {workspace}")
            definition = entity.definition
            run_id = self.ids.new_id()
            limit, left = lifetime_limit(definition), self._lifetime_left(entity, definition)
            if limit is not None and left is not None and left <= 0:
                raise lifetime_used(entity.name, limit)
            self._world.runs[run_id] = StoredRun(
                id=run_id,
                trace_id=run_id,
                workspace_id=workspace,
                entity_ref=entity.ref,
                definition=definition,
                input=_json(self.pii.sealed(definition, input)),
                created_at=self.clock(),
                depth_limit=definition["governance"]["execution_limits"]["max_recursion_depth"],
                created_by_id=created_by_id,
                context=_json(self.pii.sealed(definition, context or {})),
                trial=trial,
                sandbox=sandbox,
                **run_limits(definition, run_id, None, left),
            )
            self._world.pins[run_id] = dict(self._world.entities)
            self._world.pinned_history[run_id] = dict(self._world.history)
            self._append_events(
                run_id,
                run_id,
                [payloads.run_created(run_id, entity.name, entity.type)],
            )
            return run_id

    def cancel(self, run_id: str) -> int:
        """Ask the run and its descendants to stop (as `run_cancel` does); answer how many
        active runs were asked. Hinting the idle ones is the caller's job."""
        with self._world.lock:
            found = [run_id, *descendants(run_id, self._children_of)]
            count = 0
            for rid in found:
                row = self._world.runs.get(rid)
                if row is not None and row.status in (*ACTIVE, "BLOCKED"):
                    row.cancel_requested = True
                    count += 1
            for approval in self._world.approvals.values():
                if approval.run_id in found and approval.status in ("PENDING", "ESCALATED"):
                    approval.status = "CANCELLED"  # nobody needs to decide any more
            return count

    def fire(self, run_id: str, reason: str, by: str) -> int:
        """Fire a hired subordinate (as `run_fire` does): record why and who, then cancel it
        with its descendants. ValueError for a run that was not hired or has ended."""
        with self._world.lock:
            row = self._world.runs[run_id]
            if row.hired_by is None:
                raise ValueError("the run was not hired at run time")
            if row.status not in (*ACTIVE, "BLOCKED") or row.fired_reason:
                raise ValueError(f"the run is {row.status.lower()} already")
            row.fired_reason, row.fired_by = reason, by
            self._append_events(row.trace_id, run_id, [("run.fired", {"reason": reason, "by": by})])
        return self.cancel(run_id)

    def approvals(self, run_id: str | None = None) -> list[StoredApproval]:
        """The requests asked, oldest first (of one run, or all)."""
        with self._world.lock:
            found = [
                a for a in self._world.approvals.values() if run_id is None or a.run_id == run_id
            ]
            return copy.deepcopy(sorted(found, key=lambda a: a.requested_at))

    def judge_decisions(self, run_id: str) -> list[dict[str, Any]]:
        with self._world.lock:
            return copy.deepcopy([v for (r, _), v in self._world.judges.items() if r == run_id])

    def decide(
        self,
        run_id: str,
        key: str | None = None,
        *,
        decision: str = hitl.APPROVE,
        payload: Any = None,
        notes: str = "",
        constraint: dict[str, Any] | None = None,
        by: str = "alice",
    ) -> None:
        """A person decides the run's open request (as `approval_decide` does): the run
        goes back to the status it resumes at. Hinting it is the caller's job."""
        with self._world.lock:
            approval = self._open_approval(run_id, key)
            approval.status = "REJECTED" if decision == hitl.REJECT else "APPROVED"
            approval.decision = decision
            approval.payload = payload if decision == hitl.EDIT else approval.ask.payload
            approval.notes, approval.constraint, approval.decided_by = notes, constraint, by
            self._wake(approval)

    def grant_passes(self, run_id: str, passes: int) -> bool:
        """A person gives a run that ran out of passes `passes` more (as `run_grant_passes`
        does): it goes RUNNING again; answers whether it was so blocked. Hinting it is the
        caller's job."""
        with self._world.lock:
            row = self._world.runs[run_id]
            if row.status != "BLOCKED" or row.error_code != MAX_PASSES_EXHAUSTED:
                return False
            row.passes_granted += passes
            row.status, row.error_code, row.error_message = "RUNNING", "", ""
            return True

    def time_out(self, run_id: str, key: str | None = None) -> str:
        """The request's timeout fires (as `approval_fire_due` does); answers its status."""
        with self._world.lock:
            approval = self._open_approval(run_id, key)
            if approval.status == "PENDING" and approval.ask.timeout_action == "ESCALATE":
                approval.status, approval.escalated = "ESCALATED", True
                return approval.status
            approval.status = "TIMEOUT"
            approval.payload = approval.ask.payload
            self._wake(approval)
            return approval.status

    def _open_approval(self, run_id: str, key: str | None) -> StoredApproval:
        found = [
            a
            for (r, k), a in self._world.approvals.items()
            if r == run_id and (key is None or k == key) and a.status in ("PENDING", "ESCALATED")
        ]
        if len(found) != 1:
            raise KeyError(f"run {run_id} has {len(found)} open requests matching {key!r}")
        return found[0]

    def _wake(self, approval: StoredApproval) -> None:
        row = self._world.runs[approval.run_id]
        # The time waited on a person does not count against the trace's deadlines.
        waited = self.clock() - approval.requested_at
        for other in self._world.runs.values():
            same_trace = other.trace_id == row.trace_id and other.status not in TERMINAL
            if same_trace and other.deadline_at is not None:
                other.deadline_at += waited
        if row.status == "PAUSED":
            row.status = approval.ask.resume_status

    # -- read-only views for tests ----------------------------------------------------------

    def run(self, run_id: str) -> StoredRun:
        with self._world.lock:
            return copy.deepcopy(self._world.runs[run_id])

    def events(self, trace_id: str) -> list[StoredEvent]:
        with self._world.lock:
            return copy.deepcopy(self._world.events.get(trace_id, []))

    def steps(self, run_id: str) -> list[StoredStep]:
        with self._world.lock:
            return [copy.deepcopy(s) for s in self._world.steps.values() if s.run_id == run_id]

    def children_of(self, run_id: str) -> list[StoredRun]:
        with self._world.lock:
            return [copy.deepcopy(r) for r in self._world.runs.values() if r.parent_id == run_id]

    @property
    def model_calls(self) -> list[StoredModelCall]:
        with self._world.lock:
            return list(self._world.model_calls.values())

    @property
    def tool_calls(self) -> list[StoredToolCall]:
        with self._world.lock:
            return copy.deepcopy(list(self._world.tool_calls.values()))

    # -- lease ------------------------------------------------------------------------------

    def claim(self, run_id: str) -> RunView | None:
        """Claim the run's lease and read it; None when it is finished, asleep, due later or
        leased by someone else."""
        with self._world.lock:
            now = self.clock()
            row = self._world.runs.get(run_id)
            if row is None or row.status in TERMINAL:
                return None
            if row.status in ASLEEP and not row.cancel_requested:
                return None  # a paused or blocked run moves only on a decision or a cancel
            leased = row.lease_expires_at is not None and row.lease_expires_at > now
            if leased and row.lease_owner != self.owner:
                return None
            if row.wake_at is not None and row.wake_at > now:
                return None
            # A lease left behind means the last worker died mid-advance: look for calls it
            # recorded before paying for them again (not one this worker took over itself).
            resumed = bool(row.lease_owner) and run_id not in self._taken
            self._taken.discard(run_id)
            row.lease_owner = self.owner
            row.lease_expires_at = now + self._lease
            row.wake_at = None
            entity = self._world.entities[(row.workspace_id, row.entity_ref)]
            return RunView(
                id=row.id,
                trace_id=row.trace_id,
                workspace_id=row.workspace_id,
                definition=row.definition,
                status=row.status,
                input=self.pii.opened(_json(row.input)),
                state=self.pii.opened(_json(row.state)),
                plan=self.pii.opened(_json(row.plan)),
                cursor=row.cursor,
                iteration=row.iteration,
                attempt=row.attempt,
                depth=row.depth,
                depth_limit=row.depth_limit,
                parent_id=row.parent_id,
                entity_status=entity.status,
                output=self.pii.opened(_json(row.output)),
                error_code=row.error_code,
                error_message=row.error_message,
                cancel_requested=row.cancel_requested,
                lineage=list(row.lineage),
                parent_step_key=row.parent_step_key,
                spawn_group=row.spawn_group,
                began_at=row.started_at if row.started_at is not None else row.created_at,
                started=row.started_at is not None,
                resumed=resumed,
                created_by_id=row.created_by_id,
                entity_id=row.entity_ref,
                deadline=row.deadline_at,
                budget_anchor=row.budget_anchor,
                limited=row.limited,
                trial=row.trial,
                sandbox=row.sandbox,
                passes_granted=row.passes_granted,
                export_trace_id=row.export_trace_id,
            )

    def let_go(self, run_id: str) -> None:
        if run_id not in self._taken:
            return
        self._taken.discard(run_id)
        with self._world.lock:
            row = self._world.runs[run_id]
            if row.lease_owner == self.owner:
                row.lease_owner, row.lease_expires_at = "", None

    def _adopt(self, row: StoredRun, now: datetime) -> None:
        """Lease `row` to this worker if a claim would get it (spawn's or finish's adopt)."""
        if row.status in TERMINAL or (row.status in ASLEEP and not row.cancel_requested):
            return
        leased = row.lease_expires_at is not None and row.lease_expires_at > now
        if (leased and row.lease_owner != self.owner) or (
            row.wake_at is not None and row.wake_at > now
        ):
            return
        row.lease_owner, row.lease_expires_at = self.owner, now + self._lease
        self._taken.add(row.id)

    def _cancel_requested(self, run: RunView) -> RunView:
        """The run with whether someone asked it to stop since it was loaded."""
        if not run.cancel_requested:
            with self._world.lock:
                if self._world.runs[run.id].cancel_requested:
                    return run.changed(cancel_requested=True)
        return run

    def release(self, run: RunView) -> None:
        if run.status in TERMINAL or run.released:
            return  # finish, spawn or schedule already let go of the lease
        with self._world.lock:
            row = self._world.runs[run.id]
            if row.lease_owner == self.owner:
                row.lease_owner, row.lease_expires_at = "", None

    # -- the port: commits, records, reads ----------------------------------------------------

    def commit(self, run: RunView, transition: Transition) -> Committed:
        if isinstance(transition, Save):
            return Committed(self._save(run, transition))
        if isinstance(transition, Schedule):
            return Committed(self._schedule(run, transition))
        if isinstance(transition, Spawn):
            run, ids = self._spawn(run, transition)
            taken = ids[0] if ids and ids[0] in self._taken else None
            return Committed(run, child_ids=tuple(ids), taken=taken)
        if isinstance(transition, Finish):
            fired = fired_with(run)  # its unfinished hires are fired with it
            stopped = (
                self._cancel_descendants(run, fired) if transition.stop_descendants or fired else []
            )
            run, woken = self._end(run, transition)
            taken = woken if woken is not None and woken in self._taken else None
            return Committed(run, woken=woken, stopped=tuple(stopped), taken=taken)
        return Committed(self._request_approval(run, transition))

    # -- progress ---------------------------------------------------------------------------

    def _save(self, run: RunView, save: Save) -> RunView:
        run, steps, items = take_pending(run, save.steps, save.events.items)
        with self._world.lock:
            run = self._write_run(run)
            self._write_steps(run, steps)
            self._append_events(run.trace_id, run.id, items)
        return run

    def _schedule(self, run: RunView, schedule: Schedule) -> RunView:
        run, steps, items = take_pending(run, schedule.steps, schedule.events.items)
        with self._world.lock:
            run = self._write_run(
                run,
                wake_at=self.clock() + timedelta(seconds=schedule.delay_s),
                lease_owner="",
                lease_expires_at=None,
            )
            self._write_steps(run, steps)
            self._append_events(run.trace_id, run.id, items)
        return run.changed(released=True)

    def _spawn(self, run: RunView, spawn: Spawn) -> tuple[RunView, list[str]]:
        children, steps, events = spawn.children, spawn.steps, spawn.events
        with self._world.lock:
            now = self.clock()
            rows = []
            group = f"{children[0].step_key}#{run.iteration}#{run.attempt}/{len(children)}"
            cancelled = self._world.runs[run.id].cancel_requested
            reserve = Decimal(0)
            for request in children:
                entity = self._child(run, request.entity_ref)
                if entity is None:
                    raise KeyError(f"no entity {request.entity_ref!r} to start")
                row = self._child_row(run, request, entity, group=group, now=now)
                row.cancel_requested = cancelled
                if row.budget_usd is not None and run.budget_anchor is not None:
                    reserve += row.budget_usd
                rows.append(row)
                events.items.append(payloads.run_created(row.id, entity.name, entity.type, run.id))
            self._hold_quota(run, children, rows, now)  # nothing is written when refused
            if reserve and run.budget_anchor is not None:
                anchor = self._world.runs[run.budget_anchor]
                if _room(anchor) < reserve:  # nothing is written, as in a rolled-back commit
                    self._release_quota(rows)
                    raise no_room_for_children(self._limit_row(anchor), reserve)
                anchor.reserved_usd += reserve
            run, steps, items = take_pending(run, steps, events.items)
            for row in rows:
                self._world.runs[row.id] = row
            if spawn.adopt:  # the first child is leased to this worker, which goes on with it
                self._adopt(rows[0], now)
            # The run waits now: let go of the lease in the same write.
            run = self._write_run(run, lease_owner="", lease_expires_at=None)
            self._write_steps(run, steps)
            self._append_events(run.trace_id, run.id, items)
            return run.changed(released=True), [row.id for row in rows]

    def _hold_quota(
        self, run: RunView, children: list[ChildRequest], rows: list[StoredRun], now: datetime
    ) -> None:
        """Check the spawn's hires against the workspace's monthly cost quota and set aside
        what their budgets hold of it (runs/engine/limits.py `quota_hold`), as the ORM
        store's `quota_hold` does; LimitReached when it has no room."""
        hires = [(r, row) for r, row in zip(children, rows, strict=True) if r.hire is not None]
        if not hires:
            return
        holds = [quota_hold(row.budget_usd, run.budget_anchor) for _, row in hires]
        amount = sum(holds, Decimal(0))
        quota = self._world.quotas.get(run.workspace_id)
        since = month_start(now)
        spent = sum(
            (
                r.total_cost_usd
                for r in self._world.runs.values()
                if r.workspace_id == run.workspace_id
                and r.parent_id is None
                and r.created_at >= since
            ),
            Decimal(0),
        )
        held = self._world.quota_held.get(run.workspace_id, Decimal(0))
        if not quota_room(quota, spent=spent, held=held, amount=amount):
            assert quota is not None
            name = f"workspace {run.workspace_id}"
            raise quota_refused(name, quota, spent=spent, held=held, amount=amount)
        for (_, row), hold in zip(hires, holds, strict=True):
            if hold:  # given back when it ends (`_finish`)
                row.state = {**row.state, QUOTA_HELD_KEY: str(hold)}
        self._world.quota_held[run.workspace_id] = held + amount

    def _release_quota(self, rows: list[StoredRun]) -> None:
        for row in rows:
            if row.state.get(QUOTA_HELD_KEY):
                held = self._world.quota_held[row.workspace_id]
                self._world.quota_held[row.workspace_id] = held - Decimal(row.state[QUOTA_HELD_KEY])

    def _child_row(
        self,
        run: RunView,
        request: ChildRequest,
        entity: StoredEntity,
        *,
        group: str,
        now: datetime,
    ) -> StoredRun:
        """A child run of `run`'s current step, with its limits (nothing is written; raises
        LimitReached when the entity's cumulative_cost_usd is used up)."""
        child_id = self.ids.new_id()
        limit = lifetime_limit(entity.definition)
        left = self._lifetime_left(entity, entity.definition)
        if limit is not None and left is not None and left <= 0:  # nothing is written
            raise lifetime_used(entity.name, limit)
        limits = run_limits(entity.definition, child_id, run.budget_anchor, left)
        if request.hire is not None:  # its hirer's budget for it (runs/engine/hiring.py)
            limits = hired_limits(limits, request.hire.budget_usd, child_id)
        limits["limited"] = limits["limited"] or run.limited
        return StoredRun(
            **limits,
            **hired_fields(request.hire, run.id),
            deadline_at=run.deadline,
            id=child_id,
            trace_id=run.trace_id,
            workspace_id=run.workspace_id,
            entity_ref=entity.ref,
            definition=entity.definition,
            input=_json(self.pii.sealed(entity.definition, request.input)),
            created_at=now,
            depth_limit=run.depth_limit,
            parent_id=run.id,
            parent_step_key=child_step_key(request.step_key, run.iteration, run.attempt),
            state=_json(self.pii.sealed(entity.definition, request.state or {})),
            spawn_group=group,
            group_index=request.group_index,
            depth=run.depth + 1,
            lineage=[*run.lineage, run.id],
            created_by_id=run.created_by_id,
            trial=run.trial,
            sandbox=run.sandbox,
            export_trace_id=child_export_trace(run, child_id),
        )

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        keys = {child_step_key(key, run.iteration, run.attempt) for key in step_keys}
        with self._world.lock:
            rows = sorted(
                (
                    r
                    for r in self._world.runs.values()
                    if r.parent_id == run.id and r.parent_step_key in keys
                ),
                key=lambda r: r.group_index,
            )
            if any(row.status not in TERMINAL for row in rows):
                return None
            return [
                ChildOutcome(
                    run_id=row.id,
                    step_key=row.parent_step_key.rsplit("#", 1)[0],
                    status=row.status,
                    output=self.pii.opened(_json(row.output)),
                    error_code=row.error_code,
                    error_message=row.error_message,
                    entity_name=self._world.entities[(row.workspace_id, row.entity_ref)].name,
                    fired_reason=row.fired_reason,
                )
                for row in rows
            ]

    def _end(self, run: RunView, finish: Finish) -> tuple[RunView, str | None]:
        with self._world.lock:  # one commit: the end, and the parent's lease with adopt
            run, parent = self._finish(run, finish)
            if parent is not None and finish.adopt:
                self._adopt(self._world.runs[parent], self.clock())
        return run, parent

    def _finish(self, run: RunView, finish: Finish) -> tuple[RunView, str | None]:
        run, steps, items = take_pending(run, finish.steps, finish.events.items)
        with self._world.lock:
            now = self.clock()
            run = self._write_run(
                run,
                completed_at=now,
                execution_time_ms=int((now - run.began_at).total_seconds() * 1000),
                lease_owner="",
                lease_expires_at=None,
            )
            self._write_steps(run, steps)
            self._append_events(run.trace_id, run.id, items)
            row = self._world.runs[run.id]
            if (
                run.parent_id is not None
                and row.budget_anchor == run.id
                and row.budget_usd is not None
            ):
                # What it did not use goes back to where its budget was set aside.
                parent_anchor = self._world.runs[run.parent_id].budget_anchor
                if parent_anchor is not None:
                    unused = max(row.budget_usd - row.total_cost_usd, Decimal(0))
                    self._world.runs[parent_anchor].reserved_usd -= unused
            self._release_quota([row])  # a hire's hold on its workspace's quota
            if finish.forget is not None:
                gone = {m.id for m in self._memory_items(finish.forget)}
                self._world.memory = [m for m in self._world.memory if m.id not in gone]
            return run, self._woken(run)

    def _woken(self, run: RunView) -> str | None:
        """The parent a child's end wakes: an only child's, or the last of its group's."""
        if run.parent_id is None:
            return None
        if run.spawn_group.endswith("/1"):
            return run.parent_id  # an only child: the parent's claim sorts it out
        parent = self._world.runs[run.parent_id]
        if parent.status != "WAITING":
            return None
        unfinished = any(
            r.parent_id == run.parent_id
            and r.spawn_group == run.spawn_group
            and r.status not in TERMINAL
            for r in self._world.runs.values()
        )
        return None if unfinished else run.parent_id

    # -- calls ------------------------------------------------------------------------------

    def _recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None:
        if not run.resumed:
            return None
        with self._world.lock:
            found = self._world.model_calls.get(call_key)
            return found.reply if found is not None else None

    def _record_model_call(self, run: RunView, call: ModelCall) -> RunView:
        step, call_key, request, reply = call.step, call.key, call.request, call.reply
        reserved = call.reserved
        tokens = reply.prompt_tokens + reply.completion_tokens
        taken, steps, items = take_pending(run, [], [])
        with self._world.lock:
            self._hold(run)
            if call_key in self._world.model_calls:  # nothing is written, as in one commit
                raise LeaseLost(f"run {run.id}: another worker recorded {call_key}")
            run = taken
            if steps or items:
                run = self._write_run(run)
                self._write_steps(run, steps)
                self._append_events(run.trace_id, run.id, items)
            else:
                self._touch(run)
            # Kept as a replay will read it back: decoded JSON, six decimal places, no raw.
            kept = replace(
                reply,
                cost_usd=reply.cost_usd.quantize(_MICRO, ROUND_HALF_UP),
                parsed=_json(reply.parsed),
                tool_arguments=_json(reply.tool_arguments),
                tool_calls=tuple(_json(list(reply.tool_calls))) if reply.tool_calls else (),
                raw={},
            )
            self._world.model_calls[call_key] = StoredModelCall(
                call_key, run.id, step.key, step.iteration, step.attempt, request, kept
            )
            self._add_counters(
                run,
                cost=reply.cost_usd.quantize(_MICRO, ROUND_HALF_UP),
                tokens=tokens,
                llm_calls=1,
                reserved=reserved,
            )
            self._append_events(run.trace_id, run.id, [payloads.llm_call(step, reply)])
        return run

    def _recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None:
        if not run.resumed:
            return None
        with self._world.lock:
            found = self._world.tool_calls.get(key)
            if found is None or not found.success:
                return None
            return ToolResult(
                output=_json(found.output), latency_ms=found.latency_ms, replayed=True
            )

    def _record_tool_call(self, run: RunView, call: ToolCall) -> RunView:
        step, invocation, result, error = call.step, call.invocation, call.result, call.error
        reserved = call.reserved
        tool = invocation.tool
        run, steps, items = take_pending(run, [], [])
        with self._world.lock:
            if steps or items:
                run = self._write_run(run)
                self._write_steps(run, steps)
                self._append_events(run.trace_id, run.id, items)
            else:
                self._touch(run)
            output = _json(result.output) if result else None
            latency_ms = result.latency_ms if result else 0
            found = self._world.tool_calls.get(invocation.idempotency_key)
            if found is not None:  # a replay after a crash writes the same key again
                found.output, found.success = output, result is not None
                found.error_message, found.latency_ms = error[:MESSAGE_LIMIT], latency_ms
            else:
                self._world.tool_calls[invocation.idempotency_key] = StoredToolCall(
                    idempotency_key=invocation.idempotency_key,
                    run_id=run.id,
                    tool_id=tool["tool_id"],
                    tool_name=tool.get("name", tool["tool_id"]),
                    arguments=_json(invocation.arguments),
                    output=output,
                    success=result is not None,
                    error_message=error[:MESSAGE_LIMIT],
                    latency_ms=latency_ms,
                    step=step.key,
                    iteration=step.iteration,
                    attempt=step.attempt,
                    sandbox=invocation.sandbox,
                )
            self._add_counters(run, cost=Decimal(0), tokens=0, tool_calls=1, reserved=reserved)
            self._append_events(
                run.trace_id, run.id, [payloads.tool_call(step, invocation, result)]
            )
        return run

    # -- memory and artifacts ---------------------------------------------------------------

    def _memory_read(self, query: MemoryQuery) -> list[Any]:
        """The scope's items, newest first, not expired, at most `query.limit` (and the
        oldest too, `with_oldest`, when the limit left it out)."""
        with self._world.lock:
            items = self._memory_live(query.scope, query.now)
            read = items[: query.limit]
            if query.with_oldest and len(items) > len(read):
                read.append(items[-1])
            return [self.pii.opened(_json(m.content)) for m in read]

    def _memory_entries(self, query: MemoryEntries) -> list[MemoryEntry]:
        """The scope's items with their ids, newest first, not expired, past `query.skip`."""
        with self._world.lock:
            items = self._memory_live(query.scope, query.now)[query.skip :]
            return [MemoryEntry(m.id, self.pii.opened(_json(m.content))) for m in items]

    def _memory_live(self, scope: MemoryScope, now: datetime) -> list[StoredMemory]:
        return [m for m in self._memory_items(scope) if m.expires_at is None or m.expires_at > now]

    def _memory_write(self, run: RunView, item: Remembered) -> None:
        """Keep one item (once per run), then only the scope's newest `item.keep`."""
        with self._world.lock:
            if any(m.run_id == run.id for m in self._memory_items(item.scope)):
                return  # the run's end replayed after a crash: its item is kept already
            self._world.memory.append(
                StoredMemory(
                    id=next(self._world.memory_ids),
                    workspace_id=item.scope.workspace_id,
                    scope=item.scope.scope,
                    entity_id=item.scope.entity_id,
                    session=item.scope.session,
                    run_id=run.id,
                    content=_json(self.pii.sealed(run.definition, item.content)),
                    created_at=self.clock(),
                    expires_at=item.expires_at,
                )
            )
            self._memory_keep(item.scope, item.keep)

    def _memory_fold(self, run: RunView, fold: MemoryFolded) -> None:
        """`fold.into` takes the summary and `fold.others` go, all or nothing; then only the
        scope's newest `fold.keep` stay."""
        with self._world.lock:
            items = {m.id: m for m in self._memory_items(fold.scope)}
            if fold.into is not None and all(i in items for i in (fold.into, *fold.others)):
                items[fold.into].content = _json(self.pii.sealed(run.definition, fold.content))
                others = set(fold.others)
                self._world.memory = [m for m in self._world.memory if m.id not in others]
            self._memory_keep(fold.scope, fold.keep)

    def _memory_keep(self, scope: MemoryScope, keep: int | None) -> None:
        """Only the scope's newest `keep` items stay (all, without `keep`)."""
        if keep:
            dropped = {m.id for m in self._memory_items(scope)[keep:]}
            self._world.memory = [m for m in self._world.memory if m.id not in dropped]

    def artifacts(self, run: RunView) -> InMemoryArtifactStore:
        with self._world.lock:
            return self._world.artifacts.setdefault(run.workspace_id, InMemoryArtifactStore())

    def definitions(self, run: RunView, refs: list[str]) -> dict[str, Definition]:
        with self._world.lock:
            found = {ref: self._child(run, ref) for ref in refs}
        return {ref: entity.definition for ref, entity in found.items() if entity is not None}

    def child_versions(self, run: RunView, ref: str) -> list[str] | None:
        with self._world.lock:
            entity = self._resolve(run.workspace_id, ref, run.trace_id)
            if entity is None:
                return None
            return [e.version for e in self._pinned_history(run.trace_id, entity)]

    # -- inside -----------------------------------------------------------------------------

    def _child(self, run: RunView, ref: str) -> StoredEntity | None:
        """A child of the run as its trace pinned it: the entity's definition at the root's
        start, or, when its link names a version (runs/engine/versions.py), the newest
        definition saved by then whose version the range allows."""
        entity = self._resolve(run.workspace_id, ref, run.trace_id)
        if entity is None:
            return None
        wanted = self._link_range(run, ref, entity)
        if wanted is None:
            return entity
        saved = self._pinned_history(run.trace_id, entity)
        chosen = versions.newest_matching(wanted, [e.version for e in saved])
        # Of equal versions, the one saved last (as `newest_matching` picks).
        matching = [e for e in saved if e.version == chosen]
        return matching[-1] if matching else None

    def _link_range(self, run: RunView, ref: str, entity: StoredEntity) -> str | None:
        """The range of the run's link to `entity`, however the step names it."""
        ranges = versions.link_ranges(run.definition)
        if ref in ranges or not ranges:
            return ranges.get(ref)
        for child_id, wanted in ranges.items():
            if self._resolve(run.workspace_id, child_id, run.trace_id) is entity:
                return wanted
        return None

    def _pinned_history(self, trace_id: str, entity: StoredEntity) -> tuple[StoredEntity, ...]:
        """The entity's saved definitions at the trace's pin; all of them when it had none
        then (made again since), as the ORM store's pin falls back to the newest."""
        key = (entity.workspace_id, entity.ref)
        pinned = self._world.pinned_history.get(trace_id, self._world.history).get(key, ())
        return pinned or self._world.history.get(key, ())

    def _resolve(self, workspace_id: int, ref: str, trace_id: str = "") -> StoredEntity | None:
        """An entity by its reference, else by its name: as the trace pinned it, when one is
        given (its root's start), else as it is now."""
        entities = self._world.pins.get(trace_id, self._world.entities)
        found = entities.get((workspace_id, ref))
        if found is not None:
            return found
        for entity in entities.values():
            if entity.workspace_id == workspace_id and entity.name == ref:
                return entity
        return None

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    def _write_run(self, run: RunView, **extra: Any) -> RunView:
        """Write the run's view; only the lease holder may (a worker that lost the lease
        stops here). The view as written: started, once it is."""
        now = self.clock()
        row = self._hold(run)
        sealed, kept = self.pii.sealed, self.pii.kept
        row.status = run.status
        row.state = _json(sealed(run.definition, run.state))
        row.plan = _json(sealed(run.definition, run.plan))
        row.cursor = run.cursor
        row.iteration = run.iteration
        row.attempt = run.attempt
        row.output = _json(sealed(run.definition, run.output))
        row.error_code = run.error_code
        row.error_message = kept(run.definition, run.error_message[:MESSAGE_LIMIT])
        row.lease_expires_at = now + self._lease
        row.deadline_at = run.deadline
        for name, value in extra.items():
            setattr(row, name, value)
        if run.status != "PENDING" and not run.started:
            row.started_at = run.began_at or now
            return run.changed(started=True, began_at=run.began_at or now)
        return run

    def _touch(self, run: RunView) -> None:
        """Renew the lease, or learn that it is lost."""
        row = self._hold(run)
        row.lease_expires_at = self.clock() + self._lease

    def _hold(self, run: RunView) -> StoredRun:
        """The run's row, when this worker holds its lease."""
        row = self._world.runs[run.id]
        if row.lease_owner != self.owner:
            raise LeaseLost(f"run {run.id} is held by another worker")
        return row

    def _write_steps(self, run: RunView, steps: list[StepRecord]) -> None:
        now = self.clock()
        kept = self.pii.kept
        steps = [
            step.changed(
                input=kept(run.definition, step.input),
                output=kept(run.definition, step.output),
                error_message=kept(run.definition, step.error_message),
            )
            for step in steps
        ]
        for step in steps:
            key = (run.id, step.key, step.iteration, step.attempt)
            finished_at = now if step.status in STEP_DONE else None
            found = self._world.steps.get(key)
            if found is None:
                self._world.steps[key] = StoredStep(
                    run_id=run.id,
                    key=step.key,
                    iteration=step.iteration,
                    attempt=step.attempt,
                    position=step.position,
                    name=step.name[:200],
                    type=step.type,
                    status=step.status,
                    input=_json(step.input),
                    output=_json(step.output),
                    error_code=step.error_code,
                    error_message=step.error_message[:MESSAGE_LIMIT],
                    started_at=step.started_at or now,
                    finished_at=finished_at,
                )
                continue
            # As the ORM's upsert: everything but the start time.
            found.position, found.name, found.type = step.position, step.name[:200], step.type
            found.status, found.input, found.output = (
                step.status,
                _json(step.input),
                _json(step.output),
            )
            found.error_code = step.error_code
            found.error_message = step.error_message[:MESSAGE_LIMIT]
            found.finished_at = finished_at

    def _append_events(self, trace_id: str, run_id: str, items: list[Event]) -> None:
        """The run's events as its log_level writes them and pii_handling keeps them."""
        trace = self._world.events.setdefault(trace_id, [])
        definition = self._world.runs[run_id].definition
        for kind, payload in events_kept(definition, items):
            seq = len(trace) + 1
            kept = self.pii.kept(definition, payload)
            trace.append(StoredEvent(trace_id, seq, run_id, kind, _json(kept)))

    def _add_counters(
        self,
        run: RunView,
        *,
        cost: Decimal,
        tokens: int,
        llm_calls: int = 0,
        tool_calls: int = 0,
        reserved: Decimal | None = None,
    ) -> None:
        """A call counts for the run and every ancestor (`reserve` counted it already
        when `reserved` is not None; its estimate is given back at the anchor, and every run
        with a budget above the anchor turns the cost from reserved into used). A call that
        takes a run's cost across its alert threshold raises the alert, once."""
        if reserved is not None:
            llm_calls = tool_calls = 0
        crossed = []
        for rid in [run.id, *run.lineage]:
            row = self._world.runs.get(rid)
            if row is None:
                continue
            before = row.total_cost_usd
            row.total_cost_usd = (row.total_cost_usd + cost).quantize(_MICRO)
            row.total_tokens += tokens
            row.llm_calls += llm_calls
            row.tool_calls += tool_calls
            if rid == run.budget_anchor:
                row.reserved_usd -= reserved or Decimal(0)
            elif row.budget_usd is not None:
                row.reserved_usd = (row.reserved_usd - cost).quantize(_MICRO)
            alert = row.cost_alert_usd
            if alert is not None and before < alert <= row.total_cost_usd:
                crossed.append(rid)
        if crossed:
            self._append_events(
                run.trace_id, run.id, [("cost.alert", {"run_id": rid}) for rid in crossed]
            )

    # -- limits -----------------------------------------------------------------------------

    def reserve(
        self, run: RunView, *, llm_calls: int = 0, tool_calls: int = 0, estimate: Decimal
    ) -> LimitReached | None:
        with self._world.lock:
            rows = [self._world.runs[rid] for rid in [run.id, *reversed(run.lineage)]]
            refusal = first_limit_hit(
                [self._limit_row(row) for row in rows],
                anchor=run.budget_anchor,
                llm_calls=llm_calls,
                tool_calls=tool_calls,
                estimate=estimate,
            )
            if refusal is not None:
                return refusal
            for row in rows:
                row.llm_calls += llm_calls
                row.tool_calls += tool_calls
                if row.id == run.budget_anchor:
                    row.reserved_usd += estimate
            return None

    def unreserve(self, run: RunView, estimate: Decimal) -> None:
        if run.budget_anchor is not None and estimate:
            with self._world.lock:
                self._world.runs[run.budget_anchor].reserved_usd -= estimate

    def _approval_verdict(self, run: RunView, key: str) -> hitl.ApprovalVerdict | None:
        with self._world.lock:
            approval = self._world.approvals.get((run.id, key))
            if approval is None:
                return None
            return hitl.ApprovalVerdict(
                status=approval.status,
                outcome=hitl.outcome_of(
                    approval.status,
                    approval.decision,
                    approval.ask.timeout_action,
                    approval.escalated,
                ),
                payload=self.pii.opened(copy.deepcopy(approval.payload)),
                notes=approval.notes,
                constraint=copy.deepcopy(approval.constraint),
                decided_by=approval.decided_by,
            )

    def _request_approval(self, run: RunView, pause: Pause) -> RunView:
        ask, steps, events = pause.ask, pause.steps, pause.events
        with self._world.lock:
            priced = hitl.priced(ask, self._facts(run))
            required = ask.approval_required
            self._world.approvals.setdefault(
                (run.id, ask.key),
                StoredApproval(
                    run_id=run.id,
                    ask=_json_ask(self._sealed_ask(run, ask)),
                    status="PENDING" if required else "NOTIFIED",
                    risk_level=priced.level,
                    risk_factors=priced.factors,
                    cost_estimate=priced.estimate,
                    requested_at=self.clock(),
                ),
            )
            summary = self.pii.kept(run.definition, ask.reasoning_summary)
            event = hitl.approval_event(ask, priced.level, summary)
            if not required:
                return run.noted(event[0], **event[1])
            run, steps, items = take_pending(run, steps, [*events.items, event])
            run = self._write_run(run, lease_owner="", lease_expires_at=None)
            self._write_steps(run, steps)
            self._append_events(run.trace_id, run.id, items)
            return run.changed(released=True)

    def _facts(self, run: RunView) -> hitl.RunFacts:
        """The run's counters, what completed runs of its entity (roots with a root, children
        with a child) cost and took, and how long it has run."""
        row = self._world.runs[run.id]
        done = [
            r
            for r in self._world.runs.values()
            if r.entity_ref == row.entity_ref
            and r.workspace_id == row.workspace_id
            and r.status == "COMPLETED"
            and (r.parent_id is None) == (run.parent_id is None)
        ]
        times = [r.execution_time_ms for r in done if r.execution_time_ms is not None]
        now = self.clock()
        return hitl.RunFacts(
            spent_usd=row.total_cost_usd,
            tokens=row.total_tokens,
            llm_calls=row.llm_calls,
            tool_calls=row.tool_calls,
            budget_usd=row.budget_usd,
            history=hitl.RunHistory(
                completed=len(done),
                mean_cost_usd=sum((r.total_cost_usd for r in done), Decimal(0)) / len(done)
                if done
                else None,
                mean_ms=sum(times) / len(times) if times else None,
            ),
            elapsed_ms=(now - (run.began_at or now)).total_seconds() * 1000,
        )

    def _sealed_ask(self, run: RunView, ask: hitl.ApprovalAsk) -> hitl.ApprovalAsk:
        """What a person reads, and may edit and send back to the engine: sealed."""
        sealed = self.pii.sealed(run.definition, hitl.readable(ask))
        return replace(ask, **{**sealed, "alternatives": tuple(sealed["alternatives"])})

    def _awaiting_person(self, run: RunView) -> bool:
        with self._world.lock:
            return any(
                a.status in ("PENDING", "ESCALATED")
                and self._world.runs[a.run_id].trace_id == run.trace_id
                for a in self._world.approvals.values()
            )

    def _record_judge(self, run: RunView, key: str, verdict: dict[str, Any]) -> None:
        with self._world.lock:
            rationale = self.pii.kept(run.definition, verdict.get("rationale", ""))
            self._world.judges.setdefault((run.id, key), _json({**verdict, "rationale": rationale}))

    def _cancel_descendants(self, run: RunView, fired: tuple[str, str] | None) -> list[str]:
        """Ask the run's unfinished descendants to stop, as it ends; `fired` (reason, by) is
        recorded on those it hired directly, with a `run.fired` event each (as the ORM
        store's). A run that was fired itself fires nobody: its hires are cancelled."""
        with self._world.lock:
            if fired is not None and self._world.runs[run.id].fired_reason is None:
                reason, by = fired
                for row in self._world.runs.values():
                    if (
                        row.hired_by == run.id
                        and row.status not in TERMINAL
                        and row.fired_reason is None
                    ):
                        row.fired_reason, row.fired_by = reason, by
                        fired_event: Event = ("run.fired", {"reason": reason, "by": by})
                        self._append_events(row.trace_id, row.id, [fired_event])
            found = descendants(run.id, self._unfinished_children)
            for rid in found:
                self._world.runs[rid].cancel_requested = True
            return found

    def _children_of(self, parents: list[str]) -> list[str]:
        return [r.id for r in self._world.runs.values() if r.parent_id in parents]

    def _unfinished_children(self, parents: list[str]) -> list[str]:
        return [
            r.id
            for r in self._world.runs.values()
            if r.parent_id in parents and r.status not in TERMINAL
        ]

    def _lifetime_left(self, entity: StoredEntity, definition: Definition) -> Decimal | None:
        limit = lifetime_limit(definition)
        if limit is None:
            return None
        spent = held = Decimal(0)
        for row in self._world.runs.values():
            if row.workspace_id != entity.workspace_id or row.entity_ref != entity.ref:
                continue
            if row.status in TERMINAL:
                spent += row.total_cost_usd
            else:
                held += row.total_cost_usd if row.budget_usd is None else row.budget_usd
        return lifetime_left(limit, spent=spent, held=held)

    def _limit_row(self, row: StoredRun) -> LimitRow:
        return LimitRow(
            id=row.id,
            name=self._name(row),
            llm_calls=row.llm_calls,
            max_llm_calls=row.max_llm_calls,
            tool_calls=row.tool_calls,
            max_tool_calls=row.max_tool_calls,
            total_cost_usd=row.total_cost_usd,
            reserved_usd=row.reserved_usd,
            budget_usd=row.budget_usd,
            blocks=budget_blocks(row.definition),
        )

    def _name(self, row: StoredRun) -> str:
        return self._world.entities[(row.workspace_id, row.entity_ref)].name

    def _memory_items(self, scope: MemoryScope) -> list[StoredMemory]:
        """The items of a memory scope, newest first."""
        items = [
            m
            for m in self._world.memory
            if m.workspace_id == scope.workspace_id
            and m.scope == scope.scope
            and (scope.scope != "SESSION" or m.session == scope.session)
            and (scope.scope != "ENTITY" or m.entity_id == scope.entity_id)
        ]
        return sorted(items, key=lambda m: (m.created_at, m.id), reverse=True)


def _json(value: Any) -> Any:
    """The value as a JSON column gives it back."""
    if value is None:
        return None
    return json.loads(json.dumps(value, allow_nan=False))


def _room(row: StoredRun) -> Decimal:
    """What a budget has left for new work (an unlimited one: as good as anything)."""
    if row.budget_usd is None:
        return Decimal("Infinity")
    return row.budget_usd - row.total_cost_usd - row.reserved_usd


def _json_ask(ask: hitl.ApprovalAsk) -> hitl.ApprovalAsk:
    """The request as a database would keep it: its JSON parts copied through JSON."""
    return replace(
        ask,
        payload=_json(ask.payload),
        context_snapshot=_json(ask.context_snapshot),
        judge=_json(ask.judge),
    )
