"""`advance(run_id)`: take the run's lease, do the next piece of work, record it, return.

Never blocks on a child or a human: child steps start child runs and leave the run WAITING;
the last child to finish wakes the parent. Failures are data: a step that fails ends the run
with an error code from the seed's families, and every row written so far stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any, Protocol, TypedDict

from runs.engine import hitl, loop, planning, retry, review, schemas, transforms
from runs.engine import plan as plans
from runs.engine.definition import Definition
from runs.engine.ports import (
    INTERNAL_ERROR,
    INVALID_INPUT,
    LIMIT_EXCEEDED,
    NOT_ACTIVE,
    PERMISSION_DENIED,
    PII_ALLOW,
    PII_ENCRYPT,
    PII_REDACT,
    REJECTED,
    TIMEOUT,
    VALIDATION_ERROR,
    Cipher,
    Clock,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    Screening,
    ScreeningError,
    SystemClock,
    ToolError,
    ToolInvocation,
    ToolResult,
    ToolRunner,
)
from runs.engine.prompts import compose

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass
class RunView:
    """The engine's working copy of a run; the store loads and saves it."""

    id: str
    trace_id: str
    workspace_id: int
    definition: Definition
    status: str
    input: dict[str, Any]
    state: dict[str, Any]
    plan: list[dict[str, Any]] | None
    cursor: int
    iteration: int
    depth: int
    parent_id: str | None
    entity_status: str = "ACTIVE"
    attempt: int = 1  # of the step at the cursor
    depth_limit: int = 5
    lineage: list[str] = field(default_factory=list)  # ancestor run ids, root first
    parent_step_key: str = ""
    spawn_group: str = ""
    began_at: Any = None
    started: bool = False
    resumed: bool = False  # the last worker died mid-advance
    created_by_id: Any = None
    entity_id: str = ""
    released: bool = False  # the store already let go of the lease
    pending_steps: list[StepRecord] = field(default_factory=list)
    pending_events: Events = field(default_factory=lambda: Events())
    output: dict[str, Any] | None = None
    error_code: str = ""
    error_message: str = ""
    cancel_requested: bool = False
    cancel_fresh: bool = False  # the store read the cancel flag since the last step began
    deadline: Any = None  # timeout_ms from the start, or an ancestor's earlier deadline
    budget_anchor: str | None = None  # the nearest run (this one or above) with a budget
    limited: bool = False  # a call limit applies to this run or an ancestor

    def planned(self) -> list[dict[str, Any]]:
        """The run's plan, once it has one (the engine plans before it runs a step)."""
        if self.plan is None:
            raise ValueError(f"run {self.id} has no plan yet")
        return self.plan


@dataclass(frozen=True)
class ChildOutcome:
    run_id: str
    step_key: str
    status: str
    output: Any
    error_code: str
    error_message: str
    entity_name: str


@dataclass(frozen=True)
class ChildRequest:
    step_key: str
    group_index: int
    entity_ref: str
    input: dict[str, Any]
    state: dict[str, Any] | None = None  # what the child inherits (constraints a person locked)


def child_step_key(step_key: str, iteration: int, attempt: int) -> str:
    """How a child run names the parent's step that started it: a retried group (a person
    approved another attempt after a failure) starts new children under a new name."""
    return f"{step_key}#{iteration}" if attempt <= 1 else f"{step_key}#{iteration}.{attempt}"


@dataclass
class StepRecord:
    key: str
    position: int
    name: str
    type: str
    status: str
    iteration: int
    attempt: int = 1
    input: Any = None
    output: Any = None
    error_code: str = ""
    error_message: str = ""
    started_at: Any = None


@dataclass
class Events:
    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # kind, JSON payload

    def add(self, kind: str, **payload: Any) -> None:
        self.items.append((kind, payload))


class RunStore(Protocol):
    def load(self, run_id: str) -> RunView | None:
        """Claim the run's lease and read it; None when it is finished or someone holds it."""

    def save(self, run: RunView, *, steps: list[StepRecord], events: Events) -> None:
        """Persist the run, step records and events in one commit."""

    def spawn(
        self,
        run: RunView,
        *,
        children: list[ChildRequest],
        steps: list[StepRecord],
        events: Events,
        adopt: bool = False,
    ) -> list[str]:
        """Create child runs of the current step (pinned to each child's current version),
        leave the run WAITING and persist, in one commit; answer the children's ids. With
        `adopt`, the first child is created leased to this store's worker, which goes on
        with it (`taken`)."""

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        """The outcomes of the current group's child runs; None while one is unfinished."""

    def finish(
        self, run: RunView, *, steps: list[StepRecord], events: Events, adopt: bool = False
    ) -> str | None:
        """Persist a terminal run; answer the parent's id when this was the last unfinished
        child of the parent's current step. With `adopt`, the same commit takes the parent's
        lease for this store's worker when it can (`taken` says whether it did)."""

    def taken(self, run_id: str) -> bool:
        """Whether this store holds the run's lease for its worker, from `spawn` or `finish`
        with `adopt`: `load` answers it without claiming it again."""

    def let_go(self, run_id: str) -> None:
        """Give back the lease of a run `taken` and not advanced (another worker may claim
        it at once)."""

    def release(self, run: RunView) -> None: ...

    def cancel_requested(self, run: RunView) -> bool:
        """Whether someone asked the run to stop since it was loaded."""

    def schedule(
        self, run: RunView, delay_s: float, *, steps: list[StepRecord], events: Events
    ) -> None:
        """Persist the run with a due time `delay_s` from now; nothing advances it before."""

    def recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None: ...

    def record_model_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
        *,
        reserved: Decimal | None = None,
    ) -> None: ...

    def recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None: ...

    def record_tool_call(
        self,
        run: RunView,
        step: StepRecord,
        invocation: ToolInvocation,
        result: ToolResult | None,
        error: str = "",
        *,
        reserved: Decimal | None = None,
    ) -> None: ...

    def memory_read(self, run: RunView) -> list[Any]:
        """What the entity remembers, oldest first."""

    def memory_write(self, run: RunView, content: Any) -> None:
        """Remember one item under the entity's memory configuration."""

    def artifacts(self, run: RunView) -> Any:
        """The ArtifactStore of the run's workspace."""

    def child_definition(self, run: RunView, entity_ref: str) -> Definition | None:
        """The current definition of a child entity of this run's workspace, for its input
        schema; None when it no longer exists."""

    def children_definitions(self, run: RunView, refs: list[str]) -> dict[str, Definition]:
        """`child_definition` for several references at once."""

    def reserve_call(
        self, run: RunView, *, llm_calls: int = 0, tool_calls: int = 0, estimate: Decimal
    ) -> LimitReached | None:
        """Before a call: count it for the run and every ancestor and set its estimated cost
        aside at the run's budget anchor, all or nothing; answer why not when a call limit
        or the budget has no room (nothing is written then). `record_model_call` and
        `record_tool_call` with `reserved` settle it; `unreserve_call` gives it back."""

    def unreserve_call(self, run: RunView, estimate: Decimal) -> None:
        """A reserved call that failed before it cost anything gives its estimate back."""

    def cancel_descendants(self, run: RunView) -> list[str]:
        """Ask every unfinished descendant to stop; answer the ids to hint."""

    def approval_verdict(self, run: RunView, key: str) -> hitl.ApprovalVerdict | None:
        """What became of the run's request `key`; None when it was never asked."""

    def request_approval(
        self, run: RunView, ask: hitl.ApprovalAsk, *, steps: list[StepRecord], events: Events
    ) -> None:
        """Record the request; when it needs a decision, persist the run PAUSED with the
        steps and events in the same commit (the store lets go of the lease). People are
        told after commit."""

    def record_judge(self, run: RunView, key: str, verdict: dict[str, Any]) -> None:
        """Keep an LLM judge's verdict once (a replay finds it kept)."""

    def awaiting_person(self, run: RunView) -> bool:
        """Whether a request of the run's trace waits on a person."""


class LeaseLost(Exception):
    """Another worker holds the run now (this one was too slow): stop without writing.
    `wake`: a run that needs a look from any worker (the store could not take it)."""

    def __init__(self, message: str = "", *, wake: str | None = None):
        super().__init__(message)
        self.wake = wake


class LimitReached(Exception):
    """A call limit or a budget has no room for the next call. `blocks`: the run waits
    (BLOCKED, recoverable by raising the limit and resuming) instead of failing."""

    def __init__(self, code: str, message: str, *, blocks: bool = False):
        super().__init__(message)
        self.code = code
        self.blocks = blocks


BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
_NOTHING = Decimal(0)


@dataclass(frozen=True)
class LimitRow:
    """What a store knows of one run when a limit may be hit: its counts, limits, budget."""

    id: str
    name: str  # the run's entity
    llm_calls: int
    max_llm_calls: int | None
    tool_calls: int
    max_tool_calls: int | None
    total_cost_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal | None
    blocks: bool  # its entity's on_budget_exhausted is BLOCK


def first_limit_hit(
    rows: list[LimitRow], *, anchor: str | None, llm_calls: int, tool_calls: int, estimate: Decimal
) -> LimitReached | None:
    """Why the next call has no room: the first of `rows` (the run, then its ancestors up)
    whose call limit it would pass, or the anchor's budget; None when there is room."""
    for row in rows:
        if row.max_llm_calls is not None and row.llm_calls + llm_calls > row.max_llm_calls:
            return LimitReached(
                LIMIT_EXCEEDED,
                f"{row.name} reached max_llm_calls {row.max_llm_calls} "
                "(its own model calls and its descendants')",
            )
        if row.max_tool_calls is not None and row.tool_calls + tool_calls > row.max_tool_calls:
            return LimitReached(
                LIMIT_EXCEEDED,
                f"{row.name} reached max_tool_calls {row.max_tool_calls} "
                "(its own tool calls and its descendants')",
            )
        if (
            row.id == anchor
            and row.budget_usd is not None
            and (row.total_cost_usd + row.reserved_usd + estimate > row.budget_usd)
        ):
            return LimitReached(
                BUDGET_EXHAUSTED,
                f"budget_exhausted: {row.name} has spent ${row.total_cost_usd.normalize()} and "
                f"holds ${row.reserved_usd.normalize()} for work under way of its "
                f"${row.budget_usd.normalize()} max_cost_usd; the next model call may cost up "
                f"to ${estimate.normalize()}",
                blocks=row.blocks,
            )
    return None


def no_room_for_children(anchor: LimitRow, amount: Decimal) -> LimitReached:
    """Why the children to start do not fit in their budget anchor's budget."""
    if anchor.budget_usd is None:
        raise ValueError(f"the budget anchor {anchor.id} has no budget")
    left = anchor.budget_usd - anchor.total_cost_usd - anchor.reserved_usd
    return LimitReached(
        BUDGET_EXHAUSTED,
        f"budget_exhausted: {anchor.name} has ${left.normalize()} left of its "
        f"${anchor.budget_usd.normalize()} max_cost_usd; the children to start ask "
        f"${amount.normalize()} together",
        blocks=anchor.blocks,
    )


def lifetime_used(name: str, limit: Decimal) -> LimitReached:
    return LimitReached(
        LIMIT_EXCEEDED,
        f"{name} has used its cumulative_cost_usd of ${limit.normalize()} "
        "(what its runs cost, and hold while they run)",
    )


def budget_blocks(definition: Definition) -> bool:
    """Whether a run out of budget waits BLOCKED (else it fails)."""
    return definition["governance"]["cost_controls"].get("on_budget_exhausted", "BLOCK") == "BLOCK"


def lifetime_limit(definition: Definition) -> Decimal | None:
    """The entity's cumulative_cost_usd: what all its runs together may ever cost."""
    limit = definition["governance"]["cost_controls"].get("cumulative_cost_usd")
    return None if limit is None else Decimal(str(limit))


class RunLimits(TypedDict):
    """What `run_limits` sets on a new run."""

    max_llm_calls: int | None
    max_tool_calls: int | None
    limited: bool
    budget_usd: Decimal | None
    budget_anchor: str | None
    cost_alert_usd: Decimal | None


def run_limits(
    definition: Definition,
    run_id: str,
    parent_anchor: str | None,
    lifetime_left: Decimal | None = None,
) -> RunLimits:
    """A new run's limits from its entity's governance section (seed 000 §3.7): its call
    limits, its budget and the run it is anchored at (itself, when it has a budget; else
    its parent's anchor), and its cost alert threshold. `lifetime_left`: what the entity's
    cumulative_cost_usd leaves (the run's budget is no more than that)."""
    governance = definition["governance"]
    limits, costs = governance["execution_limits"], governance["cost_controls"]
    budget: float | Decimal | None = costs.get("max_cost_usd")
    alert = costs.get("alert_threshold_usd")
    if lifetime_left is not None:  # cumulative_cost_usd: what the entity has left, at most
        budget = lifetime_left if budget is None else min(Decimal(str(budget)), lifetime_left)
    return {
        "max_llm_calls": limits.get("max_llm_calls"),
        "max_tool_calls": limits.get("max_tool_calls"),
        "limited": limits.get("max_llm_calls") is not None
        or limits.get("max_tool_calls") is not None,
        "budget_usd": None if budget is None else Decimal(str(budget)),
        "budget_anchor": run_id if budget is not None else parent_anchor,
        "cost_alert_usd": None if alert is None else Decimal(str(alert)),
    }


class StepFailed(Exception):
    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after_s: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.retry_after_s = retry_after_s  # a rate limit's wait: the same attempt, later


@dataclass
class Engine:
    store: RunStore
    model: ModelClient
    tools: ToolRunner
    enqueue: Callable[[str], None]
    # Content filters and pii_handling (governance/safety.py's SafetyScreening on the server).
    screening: Screening
    enqueue_later: Callable[[str, float], None] = lambda run_id, delay_s: None
    max_steps_per_advance: int = 200
    hard_cap: int = 25  # passes of a loop, whatever max_iterations says
    # pii_handling ENCRYPT: `encrypt(str) -> str` and `decrypt(str) -> str` (the vault's);
    # without one, ENCRYPT stores redacted text instead, never the plain text.
    cipher: Cipher | None = None
    clock: Clock = field(default_factory=SystemClock)
    # Handoff: a worker goes on itself with the first child it starts and the parent it
    # wakes (their leases taken in the same commits) instead of a hint to any worker and a
    # claim, for up to this many seconds per `advance`; then it hints the next one. 0: off.
    handoff_s: float = 0.0
    _handoff: str | None = field(default=None, init=False, repr=False)

    def advance(self, run_id: str) -> None:
        """Do the run's next pieces of work until it waits, pauses or ends; with handoff,
        then the same for the runs this worker took over on the way."""
        until = self.clock.now() + timedelta(seconds=self.handoff_s)
        next_id: str | None = run_id
        while next_id is not None:
            self._handoff = None
            try:
                self._advance_one(next_id)
            except BaseException:
                if self._handoff is not None:
                    self._pass_on(self._handoff)  # the next run goes to any worker
                raise
            next_id, self._handoff = self._handoff, None
            if next_id is not None and self.clock.now() >= until:
                self._pass_on(next_id)  # time to let other runs have this worker
                next_id = None

    def _pass_on(self, run_id: str) -> None:
        """Hand a run this worker took over to any worker instead."""
        with contextlib.suppress(Exception):  # else its lease expires and the sweeper hints
            self.store.let_go(run_id)
        self.enqueue(run_id)

    def _advance_one(self, run_id: str) -> None:
        run = self.store.load(run_id)
        if run is None:
            return
        try:
            try:
                self._drive(run)
            except LimitReached as limit:
                self._limit_reached(run, limit)
        except hitl.Paused:
            return  # the run waits on a person; the decision hands it back
        except LeaseLost as lost:
            if lost.wake is not None:
                self.enqueue(lost.wake)
            return  # the run is another worker's now; it carries on from what was recorded
        except Exception as exc:  # a bug must not leave the run RUNNING forever
            if run.status not in TERMINAL:
                with contextlib.suppress(LeaseLost):
                    self._fail(run, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", Events(), [])
            raise
        finally:
            self.store.release(run)

    # -- the loop ---------------------------------------------------------------------------

    def _drive(self, run: RunView) -> None:
        if run.status in TERMINAL:
            return
        if run.cancel_requested:
            self._cancel(run)
            return
        if run.state.get(hitl.REPLAY_KEY):
            # Resuming after a person's decision replays the step up to its checkpoint: its
            # model calls were recorded before the pause and are reused, not paid again.
            run.resumed = True
            run.state = {k: v for k, v in run.state.items() if k != hitl.REPLAY_KEY}
        if run.state.get(hitl.LOCKED_KEY):
            run.definition = hitl.with_locked(run.definition, run.state)
        if run.state.get(hitl.AWAITING_KEY) and not self._resume_decision(run):
            return
        if run.status == "PENDING" and not self._start(run):
            return
        for _ in range(self.max_steps_per_advance):
            if run.status == "WAITING":
                if self._expired(run):
                    self._timeout(run)
                    return
                if not self._join(run):
                    return
                continue
            group = plans.group_at(run.plan or [], run.cursor)
            if not group:
                if self._complete(run):
                    continue  # another pass of the plan
                return
            if self.store.cancel_requested(run):
                self._cancel(run)  # the step in flight finished; no new one starts
                return
            if self._expired(run):
                self._timeout(run)
                return
            if not self._custom_checkpoints(run, group[0]):
                return
            first = run.planned()[group[0]]
            if first["type"] == plans.CHILD:
                if not self._start_children(run, group):
                    continue
                return
            if not self._run_step(run, group[0]):
                return
        run.status = "RUNNING"
        self.store.save(run, steps=[], events=Events())
        self.enqueue(run.id)  # a long plan yields the worker, then goes on

    def _cancel(self, run: RunView) -> None:
        """End the run CANCELLED; the steps it waits on (children, a person) end with it."""
        steps = self._unfinished_steps(run, "CANCELLED")
        self._finish(run, "CANCELLED", "CANCELLED", "the run was cancelled", Events(), steps)

    def _unfinished_steps(self, run: RunView, status: str, **fields: Any) -> list[StepRecord]:
        """The records of the steps a run ending now leaves behind: its group of steps
        waiting on children, or the tool step waiting on a person's approval."""
        if not run.plan:
            return []
        attempt = 1  # a group's records are written as attempt 1 (_start_children, _join)
        if run.status == "WAITING":
            positions = plans.group_at(run.plan, run.cursor)
        elif (
            run.status == "PAUSED"
            and hitl.AWAITING_KEY not in run.state
            and run.cursor < len(run.planned())
            and run.planned()[run.cursor]["type"] == "TOOL_CALL"
        ):
            positions, attempt = [run.cursor], run.attempt
        else:
            return []
        return [
            StepRecord(
                run.planned()[position]["key"],
                position,
                run.planned()[position]["name"],
                run.planned()[position]["type"],
                status,
                run.iteration,
                attempt=attempt,
                **fields,
            )
            for position in positions
        ]

    def _start(self, run: RunView) -> bool:
        events = Events()
        run.began_at = self.clock.now()
        if run.entity_status != "ACTIVE":
            self._fail(
                run,
                NOT_ACTIVE,
                f"{run.definition['identity']['name']} is {run.entity_status}; only ACTIVE "
                "entities run",
                events,
                [],
            )
            return False
        problems = input_problems(run.definition, run.input)
        if problems:
            self._fail(run, INVALID_INPUT, "; ".join(problems), events, [])
            return False
        missing = [
            tool["tool_id"]
            for tool in run.definition["capabilities"]["tools"]
            if not tool.get("implementation")
        ]
        if missing:
            self._fail(
                run,
                VALIDATION_ERROR,
                "tools without an implementation cannot run: " + ", ".join(missing),
                events,
                [],
            )
            return False
        timeout_ms = run.definition["governance"]["execution_limits"]["timeout_ms"]
        own = run.began_at + timedelta(milliseconds=timeout_ms)
        run.deadline = own if run.deadline is None else min(run.deadline, own)
        carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in (run.state or {})}
        start_state = dict(run.input)
        verdict = self._before_execution(run, carried, events)
        if verdict is False:
            return False
        if isinstance(verdict, dict):
            start_state = verdict  # a person edited the input
        carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in (run.state or {})}
        names = self._child_names(run)
        static = plans.build_static_plan(run.definition, names)
        run.state = {**start_state, **carried}
        run.status = "RUNNING"
        run.cursor = 0
        events.add("run.status", status="RUNNING")
        plan = self._plan(run, static, names, events, feedback="")
        if plan is None:
            return False
        plan = self._after_planning(run, plan, static, events)
        if plan is None:
            return False
        run.plan = plan
        events.add("plan.ready", steps=[s["name"] for s in run.plan])
        # Written with the next write of this run: replaying a start is deterministic.
        self._later(run, [], events)
        return True

    def _child_names(self, run: RunView) -> dict[str, str]:
        refs = [link["child_id"] for link in run.definition["hierarchy"]["children"]]
        if not refs:
            return {}
        found = self.store.children_definitions(run, refs)
        return {ref: child["identity"]["name"] for ref, child in found.items()}

    def _plan(
        self,
        run: RunView,
        static: list[dict[str, Any]],
        names: dict[str, str],
        events: Events,
        *,
        feedback: str,
    ) -> list[dict[str, Any]] | None:
        """The plan of this pass: the static plan, or the model's plan reconciled with it.
        A rejected dynamic plan ends the run (VALIDATION_ERROR); None then."""
        if not run.definition["planning"]["dynamic_planning"].get("enabled"):
            return static
        record = StepRecord(
            f"plan#{run.attempt}" if feedback else "plan",
            0,
            "Plan",
            "PLAN",
            "COMPLETED",
            run.iteration,
        )
        request = planning.planning_request(
            run.definition,
            child_names=names,
            static=static,
            run_input=run.input,
            request_factory=lambda **kw: self._model_request(run, **kw),
            context={"state": run.state} if feedback else None,
            feedback=feedback,
        )
        try:
            reply = self._call_model(run, record, request)
        except StepFailed as failure:
            record.status, record.error_code, record.error_message = (
                "FAILED",
                failure.code,
                str(failure),
            )
            self._fail(run, failure.code, f"planning: {failure}", events, [record])
            return None
        proposed = planning.parse_dynamic_plan(reply, run.definition, names)
        if isinstance(proposed, planning.PlanRejected):
            record.status, record.error_code = "FAILED", VALIDATION_ERROR
            record.error_message = proposed.message
            self._fail(run, VALIDATION_ERROR, proposed.message, events, [record])
            return None
        plan, notes = planning.reconcile_for(run.definition, static, proposed)
        record.output = {"proposed": [s["name"] for s in proposed], "notes": notes}
        events.add("plan.reconciled", notes=notes, steps=[s["name"] for s in plan])
        self._later(run, [record], Events())
        return plan

    @staticmethod
    def _later(run: RunView, steps: list[StepRecord], events: Events) -> None:
        """Buffer records for the store's next write of this run (each write takes them).
        Safe because every model and tool call is recorded at once, in its own commit: a
        replay after a crash reuses them instead of paying again."""
        run.pending_steps.extend(steps)
        run.pending_events.items.extend(events.items)

    def _data(self, run: RunView) -> dict[str, Any]:
        return plans.logic_data(run.state, run.input, run.iteration)

    def _start_children(self, run: RunView, group: list[int]) -> bool:
        """Start the group's child runs; False when every child was skipped by its condition."""
        data = self._data(run)
        steps: list[StepRecord] = []
        requests: list[ChildRequest] = []
        events = Events()
        for position in group:
            step = run.planned()[position]
            if not plans.holds(step.get("condition"), data):
                record = StepRecord(
                    step["key"], position, step["name"], step["type"], "SKIPPED", run.iteration
                )
                steps.append(record)
                events.add("step.skipped", step=step["name"], reason="condition is false")
                continue
            child = self.store.child_definition(run, step["target_entity"])
            if child is None:
                self._fail(
                    run,
                    VALIDATION_ERROR,
                    f"step {step['name']!r}: child {step['target_entity']!r} no longer exists",
                    events,
                    steps,
                )
                return True
            child_input = plans.map_input(
                step.get("input_mapping") or {},
                child["io_contract"]["input"]["schema"],
                data,
            )
            steps.append(
                StepRecord(
                    step["key"],
                    position,
                    step["name"],
                    step["type"],
                    "WAITING",
                    run.iteration,
                    input=child_input,
                    started_at=self.clock.now(),
                )
            )
            carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in run.state}
            requests.append(
                ChildRequest(
                    step["key"], len(requests), step["target_entity"], child_input, carried or None
                )
            )
            events.add("step.started", step=step["name"], type=step["type"])
        if requests and run.depth + 1 > run.depth_limit:
            self._fail(
                run,
                LIMIT_EXCEEDED,
                f"starting {requests[0].entity_ref!r} would nest {run.depth + 1} levels deep, "
                f"more than max_recursion_depth {run.depth_limit} of the run's root",
                events,
                steps,
            )
            return True
        if not requests:
            run.cursor = group[-1] + 1
            self.store.save(run, steps=steps, events=events)
            return False
        run.status = "WAITING"
        run.waiting_on = [r.step_key for r in requests]  # type: ignore[attr-defined]
        adopt = self.handoff_s > 0
        ids = self.store.spawn(run, children=requests, steps=steps, events=events, adopt=adopt)
        for child_id in ids:
            if adopt and self._handoff is None and self.store.taken(child_id):
                self._handoff = child_id  # this worker goes on with it
            else:
                self.enqueue(child_id)
        return True

    def _join(self, run: RunView) -> bool:
        """Collect the current group's children; False while one is unfinished."""
        group = plans.group_at(run.plan or [], run.cursor)
        keys = [run.planned()[i]["key"] for i in group]
        outcomes = self.store.children(run, keys)
        if outcomes is None:
            return False
        events = Events()
        steps: list[StepRecord] = []
        failed: ChildOutcome | None = None
        position_of = {run.planned()[i]["key"]: i for i in group}
        for outcome in outcomes:
            step = run.planned()[position_of[outcome.step_key]]
            if outcome.status == "COMPLETED":
                self._new_state(run, step, outcome.output, events)
                steps.append(
                    StepRecord(
                        step["key"],
                        position_of[outcome.step_key],
                        step["name"],
                        step["type"],
                        "COMPLETED",
                        run.iteration,
                        output=outcome.output,
                    )
                )
                events.add("step.finished", step=step["name"], status="COMPLETED")
            else:
                failed = failed or outcome
                steps.append(
                    StepRecord(
                        step["key"],
                        position_of[outcome.step_key],
                        step["name"],
                        step["type"],
                        "FAILED",
                        run.iteration,
                        error_code=outcome.error_code,
                        error_message=outcome.error_message,
                    )
                )
                events.add("step.finished", step=step["name"], status=outcome.status)
        if failed is not None:
            code = failed.error_code or "CHILD_FAILED"
            message = f"{failed.entity_name} {failed.status.lower()}: {failed.error_message}"
            if failed.status == "FAILED":
                position = position_of[failed.step_key]
                self._on_failure(
                    run, run.planned()[position], position, code, message, events, steps
                )
            self._fail(run, code, message, events, steps)
            return False
        run.status = "RUNNING"
        self._go_on(run, run.planned()[group[-1]], group[-1], events, steps)
        return run.status == "RUNNING"

    def _go_on(
        self,
        run: RunView,
        step: dict[str, Any],
        position: int,
        events: Events,
        steps: list[StepRecord],
    ) -> None:
        """After a step: follow its exit conditions, else the next step; persist."""
        target = plans.next_index(run.planned(), step, self._data(run))
        if target == "END":
            run.cursor = len(run.planned())
            events.add("step.exit", step=step["name"], to="END")
        elif target == "ESCALATE":
            events.add("step.exit", step=step["name"], to="ESCALATE")
            reason = f"an exit condition of step {step['name']!r} escalates to a person"
            output = run.state.get(step["name"])
            schema = (
                run.definition["io_contract"]["output"]["schema"]
                if step["type"] == "THOUGHT"
                else None
            )
            self._ask(
                run,
                hitl.default_checkpoint(run.definition, "EXIT_ESCALATE", reason),
                key=f"EXIT:{step['key']}:{run.iteration}:{run.attempt}",
                step_name=step["name"],
                subject="output",
                payload=output,
                edit_schema=schema,
                reasoning=f"{reason}. Approve to go on with its output, edit the output, or "
                "reject to end the run.",
                steps=steps,
                events=events,
                risk=[("medium", reason)],
                awaiting={"position": position},
            )
            return
        elif isinstance(target, int):
            run.cursor = target
            events.add("step.exit", step=step["name"], to=run.planned()[target]["name"])
        else:
            run.cursor = position + 1
        run.attempt = 1
        upcoming = run.planned()[run.cursor] if run.cursor < len(run.planned()) else None
        if upcoming is None or upcoming["type"] == plans.CHILD:
            # The run ends or starts children next: that write carries this step.
            self._later(run, steps, events)
        else:
            self.store.save(run, steps=steps, events=events)

    def _run_step(self, run: RunView, position: int) -> bool:
        step = run.planned()[position]
        record = StepRecord(
            step["key"],
            position,
            step["name"],
            step["type"],
            "RUNNING",
            run.iteration,
            attempt=run.attempt,
            started_at=self.clock.now(),
        )
        events = Events()
        events.add("step.started", step=step["name"], type=step["type"])
        try:
            if step["type"] == "TOOL_CALL":
                output = self._tool_step(run, step, record)
            else:
                output = self._thought_step(run, step, record)
        except LimitReached as limit:
            # No room for the step's next call: it waits with the run (BLOCKED), or fails.
            record.status = "WAITING" if limit.blocks else "FAILED"
            record.error_code, record.error_message = limit.code, str(limit)
            if not limit.blocks:
                events.add("step.finished", step=step["name"], status="FAILED", error=limit.code)
            self._later(run, [record], events)
            self._limit_reached(run, limit)
            return False
        except StepFailed as failure:
            record.status, record.error_code = "FAILED", failure.code
            record.error_message = str(failure)
            if failure.retry_after_s is not None:
                # A rate limit: the same attempt runs again when the limit has room; the
                # retry policy's attempts are for failures, not for waiting one's turn.
                delay = max(failure.retry_after_s, 0.05)
                record.status = "WAITING"
                events.add("step.rate_limited", step=step["name"], delay_s=round(delay, 3))
                self.store.schedule(run, delay, steps=[record], events=events)
                self.enqueue_later(run.id, delay)
                return False
            events.add(
                "step.finished",
                step=step["name"],
                status="FAILED",
                error=failure.code,
                attempt=record.attempt,
            )
            policy = run.definition["logic_gate"]["retry_policy"]
            decision = retry.decide(failure.code, failure.retryable, record.attempt, policy)
            if isinstance(decision, retry.Retry):
                run.attempt = decision.attempt
                events.add(
                    "step.retry",
                    step=step["name"],
                    attempt=decision.attempt,
                    delay_s=decision.delay_s,
                )
                self.store.schedule(run, decision.delay_s, steps=[record], events=events)
                self.enqueue_later(run.id, decision.delay_s)
                return False
            message = f"step {step['name']!r}: {failure}"
            if record.attempt > 1:
                message += f" (after {record.attempt} attempts; {decision.reason})"
            if failure.code == REJECTED and self._takes_alternative_path(run):
                self._later(run, [record], events)
                feedback = f"A person rejected step {step['name']!r}: {failure}"
                return self._replan(run, feedback, events)
            self._on_failure(run, step, position, failure.code, message, events, [record])
            self._fail(run, failure.code, message, events, [record])
            return False
        record.status, record.output = "COMPLETED", output
        self._new_state(run, step, output, events)
        events.add("step.finished", step=step["name"], status="COMPLETED")
        self._go_on(run, step, position, events, [record])
        return run.status == "RUNNING"

    # -- steps --------------------------------------------------------------------------------

    def _model_request(self, run: RunView, **kwargs: Any) -> ModelRequest:
        config = run.definition["logic_gate"]["reasoning_config"]
        return ModelRequest(
            provider=config["model_provider"],
            model=config["model_name"],
            temperature=config["temperature"],
            top_p=config["top_p"],
            max_tokens=config["max_tokens"],
            reasoning_mode=config["reasoning_mode"],
            **kwargs,
        )

    def _call_model(
        self, run: RunView, record: StepRecord, request: ModelRequest, index: int = 0
    ) -> ModelReply:
        try:
            return self._recorded_call(run, record, request, index)
        except ModelError as exc:
            raise StepFailed(exc.code, str(exc), retryable=exc.retryable) from None

    def _recorded_call(
        self, run: RunView, record: StepRecord, request: ModelRequest, index: int
    ) -> ModelReply:
        """A model call, recorded the moment it returns; a replay reuses the recording."""
        key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}:{index}"
        recorded = self.store.recorded_reply(run, key)
        if recorded is not None:
            return self._revealed(recorded)
        reserved = None
        if run.limited or run.budget_anchor is not None:
            estimate = self._estimate(request) if run.budget_anchor is not None else _NOTHING
            refusal = self.store.reserve_call(run, llm_calls=1, estimate=estimate)
            if refusal is not None:
                raise refusal
            reserved = estimate
        try:
            reply = self.model.complete(request)
        except ModelError:
            if reserved:
                self.store.unreserve_call(run, reserved)
            raise
        kept_request, kept_reply = self._for_the_log(run, request, reply)
        self.store.record_model_call(run, record, key, kept_request, kept_reply, reserved=reserved)
        return reply

    # -- what the logs keep (pii_handling, audit_level, observability.logging) --------------

    def _pii_mode(self, run: RunView) -> str:
        mode = run.definition["governance"]["human_oversight"].get("pii_handling", PII_REDACT)
        return PII_REDACT if mode == PII_ENCRYPT and self.cipher is None else mode

    def _protect(self, run: RunView, value: Any) -> Any:
        mode = self._pii_mode(run)
        if mode == PII_ALLOW or value is None:
            return value
        encrypt = self.cipher.encrypt if mode == PII_ENCRYPT and self.cipher else None
        return self.screening.pii_protect(value, mode, encrypt)

    def _revealed(self, reply: ModelReply) -> ModelReply:
        """A recorded reply as the engine needs it again: encrypted personal data decrypted
        (redacted data stays redacted: a replay continues with what the log kept)."""
        if self.cipher is None:
            return reply
        decrypt = self.cipher.decrypt

        def reveal(value: Any) -> Any:
            return None if value is None else self.screening.pii_reveal(value, decrypt)

        return replace(
            reply,
            content=reveal(reply.content),
            parsed=reveal(reply.parsed),
            tool_arguments=reveal(reply.tool_arguments),
        )

    def _for_the_log(
        self, run: RunView, request: ModelRequest, reply: ModelReply
    ) -> tuple[ModelRequest, ModelReply]:
        """The call as its log row keeps it: the prompt only when the entity logs thoughts
        (log_thoughts, and an audit_level above MINIMAL), personal data in prompt and answer
        as pii_handling says (ALLOW, REDACT, ENCRYPT)."""
        oversight = run.definition["governance"]["human_oversight"]
        logging = run.definition["observability"]["logging"]
        if not logging.get("log_thoughts", True) or oversight.get("audit_level") == "MINIMAL":
            request = replace(request, messages=({"role": "system", "content": NOT_LOGGED},))
        if self._pii_mode(run) == "ALLOW":
            return request, reply
        # One pass over the four values: each is scanned as it would be on its own.
        messages, content, parsed, tool_arguments = self._protect(
            run, (list(request.messages), reply.content, reply.parsed, reply.tool_arguments)
        )
        request = replace(request, messages=tuple(messages))
        reply = replace(reply, content=content, parsed=parsed, tool_arguments=tool_arguments)
        return request, reply

    def _estimate(self, request: ModelRequest) -> Decimal:
        """The most a call can cost, to set aside before it is made (0 when unknown)."""
        estimate = getattr(self.model, "estimate_cost", None)
        return estimate(request) if estimate is not None else _NOTHING

    def _messages(self, run: RunView, instruction: str) -> tuple[dict[str, Any], ...]:
        """The prompt of a THOUGHT or tool-arguments call under the entity's context
        engineering, memory and iteration context."""
        definition = run.definition
        model_name = definition["logic_gate"]["reasoning_config"]["model_name"]
        loop_control = definition["planning"]["loop_control"]
        history = run.state.get(HISTORY_KEY) or []
        iterations = (
            loop.iteration_context(history, loop_control["iteration_context_mode"])
            if history
            else None
        )
        if not hasattr(run, "_memory"):
            run._memory = self.store.memory_read(run)  # type: ignore[attr-defined]
        messages, dropped = compose(
            definition,
            instruction=instruction,
            run_input=run.input,
            state=run.state,
            plan=run.plan,
            memory=run._memory,  # type: ignore[attr-defined]
            iterations=iterations,
            count_tokens=lambda text: self.model.count_tokens(model_name, text),
            artifact_store=self.store.artifacts(run),
        )
        if dropped:
            run.pending_events.add("context.trimmed", dropped=dropped)
        return messages

    def _thought_step(self, run: RunView, step: dict[str, Any], record: StepRecord) -> Any:
        output_schema = run.definition["io_contract"]["output"]["schema"]
        data = self._data(run)
        template = step.get("prompt_template") or (
            "Answer with the output this entity promises, as JSON."
            if output_schema.get("properties")
            else "Answer the request."
        )
        instruction = plans.render_template(template, data)
        schema = output_schema if output_schema.get("properties") else None
        request = self._model_request(
            run,
            messages=self._messages(run, instruction),
            response_schema=schema,
            purpose="THOUGHT",
        )
        record.input = {"prompt": instruction}
        reply = self._call_model(run, record, request)
        if schema is not None:
            if not isinstance(reply.parsed, dict):
                raise StepFailed("LLM_ERROR", "the model did not answer the JSON asked for")
            return self._screened(run, step, record, reply.parsed)
        return self._screened(run, step, record, {"text": reply.content})

    def _screened(
        self, run: RunView, step: dict[str, Any], record: StepRecord, output: dict[str, Any]
    ) -> dict[str, Any]:
        """The model's output through the entity's content filters (seed 000 §3.7.4): what
        they flag is redacted, or fails the step, as `on_flagged_output` says, and the
        trace says which filters flagged what kind (never the flagged text)."""
        rails = run.definition["governance"]["safety_rails"]
        filters = set(rails.get("content_filters") or [])
        if not filters:
            return output
        kinds: list[str] = []
        screened = output
        local = filters - {"BIAS"}
        if local:
            strings = _strings(output)
            for findings in self.screening.scan_many(strings, local):
                kinds += [f"{finding.filter}:{finding.kind}" for finding in findings]
            if kinds:
                screened = self.screening.redact_value(output, local)
        if "BIAS" in filters:
            config = run.definition["logic_gate"]["reasoning_config"]
            text = "\n".join(_strings(output))
            judge = self.screening.bias_judge_request(
                text, provider=config["model_provider"], model=config["model_name"]
            )
            try:
                reply = self._call_model(run, record, judge, 1)
                verdict = self.screening.bias_verdict(reply, text=text)
            except ScreeningError as exc:
                raise StepFailed("LLM_ERROR", f"the bias judge failed: {exc}") from None
            if verdict is not None:
                kinds.append("BIAS:BIAS")
                screened = _replace_strings(screened, "[REDACTED:BIAS]")
        if not kinds:
            return output
        kinds = sorted(set(kinds))
        action = rails.get("on_flagged_output", "REDACT")
        run.pending_events.add("safety.flagged", step=step["name"], kinds=kinds, action=action)
        if action == "FAIL":
            raise StepFailed(
                VALIDATION_ERROR,
                "the content filters flagged the model's output: " + ", ".join(kinds),
            )
        return screened

    def _tool_step(self, run: RunView, step: dict[str, Any], record: StepRecord) -> Any:
        tools = {t["tool_id"]: t for t in run.definition["capabilities"]["tools"]}
        tool = tools.get(step["tool_id"])
        if tool is None or "function_schema" not in tool:
            raise StepFailed(VALIDATION_ERROR, f"tool {step['tool_id']!r} is not available")
        function = tool["function_schema"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        data = self._data(run)
        if step.get("input_mapping"):
            arguments = plans.map_input(step["input_mapping"], parameters, data)
        else:
            name = function.get("name") or tool["tool_id"]
            request = self._model_request(
                run,
                messages=self._messages(
                    run,
                    f"Call the tool {name} with the right arguments for this step: {step['name']}.",
                ),
                tools=(
                    {
                        "name": name,
                        "description": function.get("description", ""),
                        "parameters": parameters,
                    },
                ),
                tool_choice=name,
                purpose="TOOL_ARGUMENTS",
            )
            reply = self._call_model(run, record, request)
            arguments = reply.tool_arguments or {}
        record.input = arguments
        arguments = self._tool_approval(run, step, tool, arguments, record)
        record.input = arguments
        self._check_tool_call(run, tool, arguments, data)
        key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}"
        invocation = ToolInvocation(
            tool=tool,
            arguments=arguments,
            idempotency_key=key,
            workspace_id=run.workspace_id,
            run_id=run.id,
            sandbox=bool(tool.get("sandbox_mode")),
            caller_id=run.created_by_id,
            approved_by=getattr(record, "approved_by", None),
        )
        recorded = self.store.recorded_tool_result(run, key)
        if recorded is not None:
            if self.cipher is None:
                return recorded.output
            return self.screening.pii_reveal(recorded.output, self.cipher.decrypt)
        reserved = None
        if run.limited:  # a tool call costs nothing to a budget, but may hit a call limit
            refusal = self.store.reserve_call(run, tool_calls=1, estimate=_NOTHING)
            if refusal is not None:
                raise refusal
            reserved = _NOTHING
        logged = self._tool_for_the_log(run, invocation)
        try:
            result = self.tools.invoke(invocation)
        except ToolError as exc:
            self.store.record_tool_call(
                run, record, logged, None, self._protect(run, str(exc)), reserved=reserved
            )
            raise StepFailed(
                exc.code,
                str(exc),
                retryable=not exc.permanent,
                retry_after_s=getattr(exc, "retry_after_s", None),
            ) from None
        kept = replace(result, output=self._protect(run, result.output))
        self.store.record_tool_call(run, record, logged, kept, reserved=reserved)
        return result.output

    def _tool_for_the_log(self, run: RunView, invocation: ToolInvocation) -> ToolInvocation:
        """The call's arguments as its log row keeps them: none when the entity does not log
        tool calls (log_tool_calls, audit_level MINIMAL), else as pii_handling says. The
        result is always kept (a replay returns it instead of calling again)."""
        oversight = run.definition["governance"]["human_oversight"]
        logging = run.definition["observability"]["logging"]
        if not logging.get("log_tool_calls", True) or oversight.get("audit_level") == "MINIMAL":
            return replace(invocation, arguments={"_": NOT_LOGGED})
        return replace(invocation, arguments=self._protect(run, invocation.arguments))

    def _new_state(self, run: RunView, step: dict[str, Any], output: Any, events: Events) -> None:
        """A step's output lands in the state; an entity that audits COMPREHENSIVEly and logs
        state changes gets a `state.changed` event naming the keys that changed."""
        before = run.state
        run.state = plans.apply_output(run.state, step["name"], output)
        oversight = run.definition["governance"]["human_oversight"]
        logging = run.definition["observability"]["logging"]
        if oversight.get("audit_level") == "COMPREHENSIVE" and logging.get(
            "log_state_changes", True
        ):
            changed = sorted(k for k, v in run.state.items() if k not in before or before[k] != v)
            events.add("state.changed", step=step["name"], keys=changed)

    def _check_tool_call(
        self, run: RunView, tool: dict[str, Any], arguments: dict[str, Any], data: dict[str, Any]
    ) -> None:
        """The entity's safety rails before a tool call (seed 000 §3.7.4): an action
        restriction on the tool, and every behavioral constraint that carries a JSONLogic
        rule, evaluated against the state plus `tool` ({tool_id, arguments}): false forbids."""
        tool_id = tool["tool_id"]
        name = run.definition["identity"]["name"]
        rails = run.definition["governance"]["safety_rails"]
        for restriction in rails.get("action_restrictions") or []:
            if restriction["restricted_action"] not in (tool_id, f"tool:{tool_id}"):
                continue
            if restriction.get("blocked_entirely"):
                raise StepFailed(
                    PERMISSION_DENIED,
                    f"{name} may not call the tool {tool_id}: action_restrictions block it",
                )
            # requires_approval: a person approved this call before (_tool_approval).
        locked = run.state.get(hitl.LOCKED_KEY) or []
        constraints = run.definition["identity"]["persona"].get("behavioral_constraints") or []
        ruled = [
            c
            for c in constraints
            if isinstance(c, dict) and c.get("rule") is not None and c not in locked
        ]
        if not ruled and not locked:
            return
        facts = {**data, "tool": {"tool_id": tool_id, "arguments": arguments}}
        refused = hitl.forbidden_by_lock(run.state, tool_id, facts) if locked else None
        if refused is not None:
            raise StepFailed(
                PERMISSION_DENIED,
                f"a constraint a person locked forbids calling {tool_id}: {refused}",
            )
        for constraint in ruled:
            if not plans.holds(constraint["rule"], facts):
                raise StepFailed(
                    VALIDATION_ERROR,
                    f"the behavioral constraint {constraint['constraint']!r} forbids calling "
                    f"{tool_id} with these arguments",
                )

    # -- human in the loop ----------------------------------------------------------------

    def _ask(
        self,
        run: RunView,
        checkpoint: hitl.Checkpoint,
        *,
        key: str,
        step_name: str,
        subject: str,
        payload: Any,
        edit_schema: dict[str, Any] | None,
        reasoning: str,
        steps: list[StepRecord],
        events: Events,
        allowed: tuple[str, ...] = hitl.ALL_DECISIONS,
        resume_status: str = "RUNNING",
        risk: list[tuple[str, str]] | None = None,
        context: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        alternatives: list[dict[str, Any]] | None = None,
        judge: dict[str, Any] | None = None,
        confidence: dict[str, Any] | None = None,
        awaiting: dict[str, Any] | None = None,
    ) -> hitl.ApprovalVerdict | None:
        """Ask a person, once per checkpoint: the decision when one was taken (the run is
        resuming); None when nobody needs to decide (a notification-only checkpoint); else
        the run is persisted PAUSED and `hitl.Paused` unwinds the engine. `awaiting` marks a
        request the run resumes from (after a failure, an exit, a review) rather than one
        it meets again by replaying the step."""
        verdict = self.store.approval_verdict(run, key)
        if verdict is not None:
            if verdict.outcome:
                return verdict
            if verdict.status == "NOTIFIED":
                return None
        plan = run.plan or []
        position = min(run.cursor, len(plan))
        upcoming = plan[position:]
        tools_by_id = {t["tool_id"]: t for t in run.definition["capabilities"]["tools"]}
        affected = [s["name"] for s in upcoming]
        impacted_tools = list(tools or []) + [
            tools_by_id[s["tool_id"]] for s in upcoming if s.get("tool_id") in tools_by_id
        ]
        snapshot = {
            "entity": run.definition["identity"]["name"],
            "input": hitl.clipped(run.input),
            "state": hitl.clipped(
                {k: v for k, v in (run.state or {}).items() if not k.startswith("_")}
            ),
            "plan": [s["name"] for s in plan],
            "cursor": run.cursor,
            "iteration": run.iteration,
            "attempt": run.attempt,
            **(context or {}),
        }
        if subject == "plan":
            snapshot["plan_rules"] = hitl.plan_rules(run.definition, payload or [])
        ask = hitl.ApprovalAsk(
            key=key,
            trigger=checkpoint.trigger,
            step_name=step_name,
            subject=subject,
            payload=payload,
            edit_schema=edit_schema,
            allowed_decisions=allowed,
            approval_required=checkpoint.approval_required,
            channels=checkpoint.channels,
            timeout_ms=checkpoint.timeout_ms,
            timeout_action=checkpoint.timeout_action,
            resume_status=resume_status,
            requested_by=run.definition["identity"]["name"],
            reasoning_summary=hitl.summary(reasoning),
            confidence=confidence or {"plan": None, "execution": None, "output": None},
            risk=tuple(risk or ()),
            alternatives=tuple(alternatives or ()),
            steps_done=sum(1 for s in plan[:position] if s),
            steps_left=len(upcoming),
            downstream_impact={
                "affected_steps": affected,
                "reversibility": hitl.reversibility(impacted_tools),
            },
            context_snapshot=snapshot,
            judge=judge,
        )
        if not checkpoint.approval_required:
            self.store.request_approval(run, ask, steps=[], events=Events())
            return None
        if awaiting is not None:
            run.state = {
                **run.state,
                hitl.AWAITING_KEY: {**awaiting, "key": key, "trigger": checkpoint.trigger},
            }
        run.state = {**run.state, hitl.REPLAY_KEY: True}
        run.status = "PAUSED"
        self.store.request_approval(run, ask, steps=steps, events=events)
        raise hitl.Paused

    def _lock(self, run: RunView, verdict: hitl.ApprovalVerdict) -> None:
        """A person locked a constraint: it binds the rest of the run and its new children."""
        if verdict.outcome != hitl.LOCK or not verdict.constraint:
            return
        locked = [*hitl.locked_rules(run.state), verdict.constraint]
        run.state = {**run.state, hitl.LOCKED_KEY: locked}
        run.definition = hitl.with_locked(run.definition, run.state)
        run.pending_events.add(
            "constraint.locked", constraint=verdict.constraint["constraint"], by=verdict.decided_by
        )

    def _refused_by_person(
        self,
        run: RunView,
        verdict: hitl.ApprovalVerdict,
        what: str,
        events: Events,
        steps: list[StepRecord],
    ) -> None:
        """A rejection or an ABORT timeout ends the run (REJECTED, TIMEOUT)."""
        if verdict.outcome == hitl.ABORT:
            self._fail(
                run,
                TIMEOUT,
                f"nobody decided on {what} in time (timeout_action ABORT, or a timeout "
                "after escalating)",
                events,
                steps,
            )
            return
        by = f" by {verdict.decided_by}" if verdict.decided_by else ""
        feedback = f": {verdict.notes}" if verdict.notes else ""
        self._fail(run, REJECTED, f"{what} was rejected{by}{feedback}", events, steps)

    def _before_execution(self, run: RunView, carried: dict[str, Any], events: Events) -> Any:
        """The BEFORE_EXECUTION checkpoint: True to go on, a dict (an edited input) to go on
        with, False when the run ended."""
        data = plans.logic_data(run.input, run.input, run.iteration)
        checkpoint = hitl.configured(run.definition, "BEFORE_EXECUTION", data)
        if checkpoint is None:
            return True
        name = run.definition["identity"]["name"]
        verdict = self._ask(
            run,
            checkpoint,
            key="BEFORE_EXECUTION",
            step_name="",
            subject="input",
            payload=run.input,
            edit_schema=run.definition["io_contract"]["input"]["schema"],
            reasoning=f"{name} is about to start with this input; its BEFORE_EXECUTION "
            "checkpoint asks a person first.",
            steps=[],
            events=Events(),
            resume_status="PENDING",
            risk=[("low", "nothing has run yet")],
        )
        if verdict is None:
            return True
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            self._refused_by_person(run, verdict, f"starting {name}", events, [])
            return False
        self._lock(run, verdict)
        if verdict.outcome == hitl.EDIT:
            problems = input_problems(run.definition, verdict.payload)
            if problems:
                self._fail(
                    run, INVALID_INPUT, "the edited input: " + "; ".join(problems), events, []
                )
                return False
            return dict(verdict.payload)
        return True

    def _after_planning(
        self, run: RunView, plan: list[dict[str, Any]], static: list[dict[str, Any]], events: Events
    ) -> list[dict[str, Any]] | None:
        """The AFTER_PLANNING checkpoint: the plan to run (as planned, or as a person edited
        it); None when the run ended."""
        checkpoint = hitl.configured(run.definition, "AFTER_PLANNING", self._data(run))
        if checkpoint is None:
            return plan
        name = run.definition["identity"]["name"]
        alternatives = []
        dynamic = run.definition["planning"]["dynamic_planning"].get("enabled")
        if dynamic and [s["name"] for s in plan] != [s["name"] for s in static]:
            alternatives = [
                {
                    "option": "the static plan: " + ", ".join(s["name"] for s in static),
                    "pros": ["designed ahead of time"],
                    "cons": ["does not adapt to this input"],
                    "confidence": None,
                },
                {
                    "option": "the reconciled plan: " + ", ".join(s["name"] for s in plan),
                    "pros": ["adapted to this input by the model"],
                    "cons": ["departs from the designed plan"],
                    "confidence": None,
                },
            ]
        run.cursor = 0
        verdict = self._ask(
            run,
            checkpoint,
            key=f"AFTER_PLANNING:{run.iteration}",
            step_name="Plan",
            subject="plan",
            payload=plan,
            edit_schema=None,
            reasoning=f"{name} planned {len(plan)} steps: "
            + ", ".join(s["name"] for s in plan)
            + ". Its AFTER_PLANNING checkpoint asks a person to approve or edit the plan.",
            steps=[],
            events=Events(),
            resume_status="PENDING",
            risk=[("medium", "a dynamic plan made by the model")] if dynamic else [],
            alternatives=alternatives,
        )
        if verdict is None:
            return plan
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            self._refused_by_person(run, verdict, f"the plan of {name}", events, [])
            return None
        self._lock(run, verdict)
        if verdict.outcome == hitl.EDIT:
            edited = hitl.normalized_plan(verdict.payload)
            events.add("plan.edited", steps=[s["name"] for s in edited], by=verdict.decided_by)
            return edited
        return plan

    def _custom_checkpoints(self, run: RunView, position: int) -> bool:
        """CUSTOM_CONDITION checkpoints before a step: False when the run paused or ended."""
        customs = hitl.custom_checkpoints(run.definition)
        if not customs:
            return True
        step = run.planned()[position]
        data = self._data(run)
        for index, config in customs:
            if not plans.holds(config["condition"], data):
                continue
            checkpoint = hitl.configured(
                {"governance": {"human_oversight": {"hitl_checkpoints": [config]}}},
                "CUSTOM_CONDITION",
                data,
            )
            if checkpoint is None:  # its condition holds: never
                continue
            verdict = self._ask(
                run,
                checkpoint,
                key=f"CUSTOM:{index}:{step['key']}:{run.iteration}:{run.attempt}",
                step_name=step["name"],
                subject="state",
                payload={k: v for k, v in run.state.items() if not k.startswith("_")},
                edit_schema={"type": "object"},
                reasoning=f"before step {step['name']!r}: the condition of a CUSTOM_CONDITION "
                "checkpoint holds against the run's state, so a person decides whether it "
                "goes on.",
                steps=[],
                events=Events(),
                risk=[("medium", "a custom condition of the entity's governance holds")],
                context={"condition": config["condition"]},
            )
            if verdict is None:
                continue
            if verdict.outcome in (hitl.REJECT, hitl.ABORT):
                self._refused_by_person(run, verdict, f"step {step['name']!r}", Events(), [])
                return False
            self._lock(run, verdict)
            if verdict.outcome == hitl.EDIT:
                run.state = {**run.state, **verdict.payload}
        return True

    def _tool_approval(
        self,
        run: RunView,
        step: dict[str, Any],
        tool: dict[str, Any],
        arguments: dict[str, Any],
        record: StepRecord,
    ) -> dict[str, Any]:
        """Before a tool call: the BEFORE_TOOL_CALL checkpoint, an action restriction that
        requires approval, an EXECUTE tool the run's starter has no grant for. One request
        covers them all. Answers the arguments to call with; raises StepFailed(REJECTED)."""
        data = {**self._data(run), "tool": {"tool_id": tool["tool_id"], "arguments": arguments}}
        checkpoint = hitl.configured(run.definition, "BEFORE_TOOL_CALL", data)
        risk: list[tuple[str, str]] = []
        permission = tool.get("permissions") or "READ"
        if permission == "WRITE":
            risk.append(("medium", f"{tool['tool_id']} writes (WRITE permission)"))
        elif permission == "EXECUTE":
            risk.append(("high", f"{tool['tool_id']} executes actions (EXECUTE permission)"))
        reasons = []
        if checkpoint is not None:
            reasons.append("the BEFORE_TOOL_CALL checkpoint asks a person before tool calls")
        rails = run.definition["governance"]["safety_rails"]
        for restriction in rails.get("action_restrictions") or []:
            if restriction["restricted_action"] not in (tool["tool_id"], f"tool:{tool['tool_id']}"):
                continue
            if restriction.get("requires_approval", True) and not restriction.get(
                "blocked_entirely"
            ):
                reasons.append("an action restriction requires a person's approval")
                risk.append(("high", f"{tool['tool_id']} is a restricted action"))
                if checkpoint is None or not checkpoint.approval_required:
                    checkpoint = hitl.default_checkpoint(
                        run.definition, "ACTION_RESTRICTION", reasons[-1]
                    )
        needs = getattr(self.tools, "needs_approval", None)
        lacking = needs(tool, run.workspace_id, run.created_by_id) if needs else None
        if lacking:
            reasons.append(lacking)
            risk.append(("high", f"no standing grant for {tool['tool_id']} (EXECUTE)"))
            if checkpoint is None or not checkpoint.approval_required:
                checkpoint = hitl.default_checkpoint(run.definition, "TOOL_GRANT", lacking)
        if checkpoint is None:
            return arguments
        function = tool.get("function_schema") or {}
        verdict = self._ask(
            run,
            checkpoint,
            key=f"TOOL:{record.key}:{record.iteration}:{record.attempt}",
            step_name=step["name"],
            subject="tool_arguments",
            payload=arguments,
            edit_schema=function.get("parameters") or {"type": "object"},
            reasoning=f"{run.definition['identity']['name']} wants to call "
            f"{function.get('name') or tool['tool_id']} in step {step['name']!r}: "
            + "; ".join(reasons),
            steps=[replace(record, status="WAITING")],
            events=Events(),
            risk=risk,
            tools=[tool],
            context={
                "tool": {
                    "tool_id": tool["tool_id"],
                    "name": function.get("name") or tool["tool_id"],
                    "description": function.get("description", ""),
                    "permissions": permission,
                },
                "arguments": arguments,
            },
        )
        if verdict is None:
            return arguments
        if verdict.outcome == hitl.PROCEED and checkpoint.trigger != "BEFORE_TOOL_CALL":
            # A timeout never stands in for a person where a person is required.
            verdict = replace(verdict, outcome=hitl.ABORT)
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            code = REJECTED if verdict.outcome == hitl.REJECT else TIMEOUT
            by = f" by {verdict.decided_by}" if verdict.decided_by else ""
            what = "rejected" + by if code == REJECTED else "not decided in time"
            feedback = f": {verdict.notes}" if verdict.notes else ""
            raise StepFailed(code, f"the call of {tool['tool_id']} was {what}{feedback}")
        self._lock(run, verdict)
        record.approved_by = verdict.decided_by or "timeout"  # type: ignore[attr-defined]
        if verdict.outcome == hitl.EDIT:
            run.pending_events.add(
                "tool.arguments_edited", step=step["name"], by=verdict.decided_by
            )
            return dict(verdict.payload)
        return arguments

    def _on_failure(
        self,
        run: RunView,
        step: dict[str, Any],
        position: int,
        code: str,
        message: str,
        events: Events,
        steps: list[StepRecord],
    ) -> bool:
        """The ON_FAILURE checkpoint: True when the run now waits on a person (who may try
        the step again, give its output, or let it fail); False to fail as usual."""
        if code in (REJECTED, "CANCELLED", TIMEOUT):
            return False  # a person already said no, or the run is over anyway
        data = {**self._data(run), "error": {"code": code, "message": message}}
        checkpoint = hitl.configured(run.definition, "ON_FAILURE", data)
        if checkpoint is None:
            return False
        schema = None
        if step["type"] == "THOUGHT":
            schema = run.definition["io_contract"]["output"]["schema"]
        elif step["type"] == plans.CHILD:
            child = self.store.child_definition(run, step["target_entity"])
            schema = child["io_contract"]["output"]["schema"] if child else None
        self._ask(
            run,
            checkpoint,
            key=f"ON_FAILURE:{step['key']}:{run.iteration}:{run.attempt}",
            step_name=step["name"],
            subject="failure",
            payload={"error": {"code": code, "message": message}},
            edit_schema=schema,
            reasoning=f"step {step['name']!r} failed ({code}): {message}. Approve to try it "
            "again, edit to give its output, reject to let the run fail.",
            steps=steps,
            events=events,
            risk=[("medium", f"step {step['name']!r} failed with {code}")],
            context={"error": {"code": code, "message": message}},
            awaiting={"position": position, "code": code, "message": message},
        )
        return False  # notification only: the failure stands

    def _resume_decision(self, run: RunView) -> bool:
        """Go on from a request the run waited on (after a failure, an ESCALATE exit, a
        review): False when the run paused again or ended."""
        awaiting = run.state[hitl.AWAITING_KEY]
        verdict = self.store.approval_verdict(run, awaiting["key"])
        if verdict is None or not verdict.outcome:
            run.status = "PAUSED"
            self.store.save(run, steps=[], events=Events())
            return False
        run.state = {k: v for k, v in run.state.items() if k != hitl.AWAITING_KEY}
        run.status = "RUNNING"
        trigger = awaiting["trigger"]
        events = Events()
        self._lock(run, verdict)
        if trigger == "REVIEW_ESCALATE":
            return self._after_review_decision(run, verdict, events)
        position = awaiting["position"]
        step = run.planned()[position]
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            if trigger == "ON_FAILURE" and verdict.outcome == hitl.ABORT:
                self._fail(run, awaiting["code"], awaiting["message"], events, [])
                return False
            if self._rejected_replan(run, verdict, step["name"], events):
                return True
            self._refused_by_person(run, verdict, f"step {step['name']!r}", events, [])
            return False
        if trigger == "ON_FAILURE":
            if verdict.outcome == hitl.PROCEED:  # nobody decided: the failure stands
                self._fail(run, awaiting["code"], awaiting["message"], events, [])
                return False
            if verdict.outcome == hitl.EDIT:
                record = StepRecord(
                    step["key"],
                    position,
                    step["name"],
                    step["type"],
                    "COMPLETED",
                    run.iteration,
                    attempt=run.attempt,
                    output=verdict.payload,
                )
                self._new_state(run, step, verdict.payload, events)
                events.add("step.finished", step=step["name"], status="COMPLETED", by="person")
                self._go_on(run, step, position, events, [record])
                return run.status == "RUNNING"
            run.attempt += 1  # approve: another attempt of the step
            run.cursor = position
            events.add("step.retry", step=step["name"], attempt=run.attempt, by="person")
            self.store.save(run, steps=[], events=events)
            return True
        # EXIT_ESCALATE: go on past the exit; an edit replaces the step's output first.
        if verdict.outcome == hitl.EDIT:
            self._new_state(run, step, verdict.payload, events)
        run.cursor = position + 1
        run.attempt = 1
        self.store.save(run, steps=[], events=events)
        return True

    def _rejected_replan(
        self, run: RunView, verdict: hitl.ApprovalVerdict, what: str, events: Events
    ) -> bool:
        """An entity that takes ALTERNATIVE_PATH (its review's on_failure, with dynamic
        planning) re-plans after a rejection, with the feedback; True when it did."""
        if verdict.outcome != hitl.REJECT or not self._takes_alternative_path(run):
            return False
        feedback = f"A person rejected {what}" + (f": {verdict.notes}" if verdict.notes else "")
        return self._replan(run, feedback, events)

    def _replan(self, run: RunView, feedback: str, events: Events) -> bool:
        """Plan again with the feedback and start a new pass; False when planning ended the
        run."""
        names = self._child_names(run)
        static = plans.build_static_plan(run.definition, names)
        run.attempt += 1
        plan = self._plan(run, static, names, Events(), feedback=feedback)
        if plan is None:
            return False
        run.plan = plan
        run.state = {**run.state, "review_feedback": feedback}
        events.add("plan.replanned", reason=feedback)
        self._next_pass(run, events)
        return True

    @staticmethod
    def _takes_alternative_path(run: RunView) -> bool:
        definition = run.definition
        return definition["logic_gate"]["review_mechanism"].get(
            "on_failure"
        ) == "ALTERNATIVE_PATH" and bool(definition["planning"]["dynamic_planning"].get("enabled"))

    # -- endings ------------------------------------------------------------------------------

    def _complete(self, run: RunView) -> bool:
        """The end of a pass: output, transformations, validation, review, convergence.
        True when another pass starts."""
        events = Events()
        definition = run.definition
        output_schema = definition["io_contract"]["output"]["schema"]
        output = plans.extract_output(run.state, output_schema)
        output, problems = transforms.apply_transformations(
            output, definition["io_contract"]["output"]["transformations"]
        )
        if problems:
            run.output = output
            message = "output transformations failed: " + "; ".join(problems)
            self._fail(run, VALIDATION_ERROR, message, events, [])
            return False
        problems = schema_problems(output_schema, output)
        validation = definition["governance"]["safety_rails"]["output_validation"]
        validation_schema = validation.get("schema")
        if validation.get("enabled") and validation_schema:
            problems += schema_problems(validation_schema, output)
        if problems:
            run.output = output
            self._fail(
                run,
                VALIDATION_ERROR,
                "the output breaks its schema: " + "; ".join(problems),
                events,
                [],
            )
            return False
        run.output = output
        verdict = self._review(run, output, events)
        if verdict != "passed":
            return verdict == "again"
        return self._after_review(run, output, events)

    def _after_review(self, run: RunView, output: dict[str, Any], events: Events) -> bool:
        """Convergence, memory, the end: True when another pass starts."""
        definition = run.definition
        loop_control = definition["planning"]["loop_control"]
        criteria = loop_control.get("convergence_criteria") or []
        history = run.state.get(HISTORY_KEY, [])
        run.state = {**run.state, HISTORY_KEY: [*history, output]}
        if criteria and not loop.converged(criteria, run.state):
            if loop.next_iteration_allowed(
                run.iteration, loop_control.get("max_iterations"), self.hard_cap
            ):
                events.add(
                    "loop.next",
                    iteration=run.iteration + 1,
                    unmet=loop.unmet(criteria, run.state),
                )
                self._next_pass(run, events)
                return True
            events.add("loop.stopped", iteration=run.iteration, reason="iteration limit")
        self.store.memory_write(run, {"input": run.input, "output": output})
        self._finish(run, "COMPLETED", "", "", events, [])
        return False

    def _next_pass(self, run: RunView, events: Events) -> None:
        run.iteration += 1
        run.cursor = 0
        run.attempt = 1
        self.store.save(run, steps=[], events=events)

    def _review(self, run: RunView, output: dict[str, Any], events: Events) -> str:
        """Run the review mechanism: "passed", "again" (another pass starts) or "stop" (the
        run failed, waits for a retry, or waits for a human)."""
        mechanism = run.definition["logic_gate"]["review_mechanism"]
        if not mechanism.get("enabled"):
            return "passed"
        record = StepRecord(
            "review", len(run.plan or []), "Review", "REVIEW", "RUNNING", run.iteration
        )
        record.attempt = run.attempt
        model = _RecordingModel(self, run, record)
        result = review.review(
            output,
            mechanism,
            model=model,
            request_factory=lambda **kw: self._model_request(run, **kw),
        )
        record.output = {
            "passed": result.passed,
            "detail": result.detail,
            "judge": result.judge,
            "passed_criteria": list(result.passed_criteria),
        }
        for index, (criterion, judged) in enumerate(result.verdicts):
            self.store.record_judge(
                run,
                f"review:{run.iteration}:{run.attempt}:{index}",
                {**judged, "criterion": criterion},
            )
        if result.human_review or (not result.passed and mechanism["on_failure"] == "ESCALATE"):
            record.status = "WAITING"
            record.error_message = result.detail
            events.add("review.escalated", detail=result.detail)
            self._review_to_person(run, output, result, record, events)
            return "stop"
        if result.passed:
            record.status = "COMPLETED"
            events.add("review.passed", criteria=list(result.passed_criteria))
            self._later(run, [record], Events())
            return "passed"
        record.status, record.error_message = "FAILED", result.detail
        record.error_code = result.error_code or VALIDATION_ERROR
        events.add("review.failed", detail=result.detail, on_failure=mechanism["on_failure"])
        if result.error_code:  # the judge itself failed: the retry policy decides
            policy = run.definition["logic_gate"]["retry_policy"]
            decision = retry.decide(result.error_code, result.retryable, run.attempt, policy)
            if isinstance(decision, retry.Retry):
                run.attempt = decision.attempt
                self.store.schedule(run, decision.delay_s, steps=[record], events=events)
                self.enqueue_later(run.id, decision.delay_s)
                return "stop"
            self._fail(run, result.error_code, f"review: {result.detail}", events, [record])
            return "stop"
        on_failure = mechanism["on_failure"]
        retries = int(run.state.get(REVIEW_RETRIES_KEY, 0))
        limit = run.definition["logic_gate"]["retry_policy"]["max_retries"]
        if on_failure in ("RETRY", "ALTERNATIVE_PATH") and retries < limit:
            run.state = {
                **run.state,
                REVIEW_RETRIES_KEY: retries + 1,
                "review_feedback": result.detail,
            }
            self._later(run, [record], events)
            if on_failure == "ALTERNATIVE_PATH":
                names = self._child_names(run)
                static = plans.build_static_plan(run.definition, names)
                plan = self._plan(
                    run,
                    static,
                    names,
                    Events(),
                    feedback=f"The last attempt failed its review: {result.detail}",
                )
                if plan is None:
                    return "stop"
                run.plan = plan
            self._next_pass(run, Events())
            return "again"
        message = f"the output failed its review: {result.detail}"
        if on_failure in ("RETRY", "ALTERNATIVE_PATH"):
            message += f" (after {retries} retries)"
        self._fail(run, VALIDATION_ERROR, message, events, [record])
        return "stop"

    def _review_to_person(
        self,
        run: RunView,
        output: dict[str, Any],
        result: review.ReviewResult,
        record: StepRecord,
        events: Events,
    ) -> None:
        """The review sends the output to a person: a failure under on_failure ESCALATE, or
        a judge that routed it to human review or was not confident enough."""
        judge = result.judge
        trigger = "REVIEW_ESCALATE"
        reason = (
            result.detail if result.human_review else "the review failed and on_failure is ESCALATE"
        )
        checkpoint = hitl.default_checkpoint(run.definition, trigger, reason)
        risk: list[tuple[str, str]] = [("medium", f"review: {result.detail}")]
        for flag in (judge or {}).get("risk_flags") or []:
            risk.append(("medium", f"judge flag: {flag}"))
        confidence: dict[str, int | None] = {"plan": None, "execution": None, "output": None}
        if judge is not None:
            confidence["output"] = round(float(judge["confidence"]) * 100)
        self._ask(
            run,
            checkpoint,
            key=f"REVIEW:{run.iteration}:{run.attempt}",
            step_name="Review",
            subject="output",
            payload=output,
            edit_schema=run.definition["io_contract"]["output"]["schema"],
            reasoning=f"{run.definition['identity']['name']}'s output needs a person: {reason}"
            + ("" if result.human_review else f". {result.detail}"),
            steps=[record],
            events=events,
            risk=risk,
            judge=judge,
            confidence=confidence,
            context={"review": result.detail},
            awaiting={},
        )

    def _after_review_decision(
        self, run: RunView, verdict: hitl.ApprovalVerdict, events: Events
    ) -> bool:
        """A person decided on an output the review sent them: approve (or PROCEED) keeps
        it, edit replaces it, reject re-plans (ALTERNATIVE_PATH) or fails."""
        name = run.definition["identity"]["name"]
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            if self._rejected_replan(run, verdict, f"the output of {name}", events):
                return True
            self._refused_by_person(run, verdict, f"the output of {name}", events, [])
            return False
        output = run.output or {}
        if verdict.outcome == hitl.EDIT:
            output = verdict.payload
            problems = schema_problems(run.definition["io_contract"]["output"]["schema"], output)
            if problems:
                run.output = output
                self._fail(
                    run, VALIDATION_ERROR, "the edited output: " + "; ".join(problems), events, []
                )
                return False
            run.output = output
            events.add("output.edited", by=verdict.decided_by)
        events.add("review.passed", by=verdict.decided_by or "timeout")
        return self._after_review(run, output, events)

    def _expired(self, run: RunView) -> bool:
        """Past the deadline, unless someone in the trace waits on a person: that time does
        not count (the decision moves the trace's deadlines by the time waited)."""
        if run.deadline is None or self.clock.now() <= run.deadline:
            return False
        return not self.store.awaiting_person(run)

    def _timeout(self, run: RunView) -> None:
        """Past the deadline: the run ends TIMEOUT and its unfinished descendants stop."""
        timeout_ms = run.definition["governance"]["execution_limits"]["timeout_ms"]
        steps = self._unfinished_steps(
            run, "FAILED", error_code=TIMEOUT, error_message="the run passed its deadline"
        )
        for child_id in self.store.cancel_descendants(run):
            self.enqueue(child_id)
        self._fail(
            run,
            TIMEOUT,
            f"the run passed its deadline (timeout_ms {timeout_ms}, or an ancestor's)",
            Events(),
            steps,
        )

    def _limit_reached(self, run: RunView, limit: LimitReached) -> None:
        """A call limit or budget had no room for the next call: fail, or wait BLOCKED at the
        step (raising the limit and resuming re-runs it)."""
        if not limit.blocks:
            code = LIMIT_EXCEEDED if limit.code == BUDGET_EXHAUSTED else limit.code
            self._fail(run, code, str(limit), Events(), [])
            return
        run.status, run.error_code, run.error_message = "BLOCKED", limit.code, str(limit)
        events = Events()
        events.add("run.status", status="BLOCKED", reason="budget_exhausted", message=str(limit))
        self.store.save(run, steps=[], events=events)

    def _fail(
        self, run: RunView, code: str, message: str, events: Events, steps: list[StepRecord]
    ) -> None:
        self._finish(run, "FAILED", code, message, events, steps)

    def _finish(
        self,
        run: RunView,
        status: str,
        code: str,
        message: str,
        events: Events,
        steps: list[StepRecord],
    ) -> None:
        run.status, run.error_code, run.error_message = status, code, message
        events.add("run.status", status=status, error_code=code, error_message=message)
        adopt = self.handoff_s > 0
        parent = self.store.finish(run, steps=steps, events=events, adopt=adopt)
        if parent is None:
            return
        if adopt and self.store.taken(parent):
            self._handoff = parent  # this worker goes on with the parent it woke
        else:
            self.enqueue(parent)


NOT_LOGGED = "[not logged: this entity's audit settings leave it out]"
HISTORY_KEY = "_iterations"  # the outputs of earlier passes, for loop control
REVIEW_RETRIES_KEY = "_review_retries"


class _RecordingModel:
    """A ModelClient for the pure modules (review, planning) whose every call is recorded
    under one step record, and reused on replay."""

    def __init__(self, engine: Engine, run: RunView, record: StepRecord):
        self.engine, self.run, self.record, self.index = engine, run, record, 0

    def complete(self, request: ModelRequest) -> ModelReply:
        index, self.index = self.index, self.index + 1
        return self.engine._recorded_call(self.run, self.record, request, index)

    def count_tokens(self, model: str, text: str) -> int:
        return self.engine.model.count_tokens(model, text)


def schema_problems(schema: dict[str, Any], value: Any) -> list[str]:
    """What `value` breaks of `schema`, a part of a pinned definition."""
    quick = schemas.quick_check(schema)
    if quick is not None and quick(value):
        return []
    validator = schemas.validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(input)"
        problems.append(f"{where}: {error.message}")
    return problems


def input_problems(definition: Definition, run_input: Any) -> list[str]:
    """io_contract input validation: the schema, then the named validation rules."""
    if not isinstance(run_input, dict):
        return ["the input must be a JSON object"]
    problems = schema_problems(definition["io_contract"]["input"]["schema"], run_input)
    if problems:
        return problems
    from runs.engine.validators import rule_problems

    return rule_problems(definition["io_contract"]["input"]["validation_rules"], run_input)


__all__ = [
    "Engine",
    "RunView",
    "RunStore",
    "LimitReached",
    "BUDGET_EXHAUSTED",
    "LIMIT_EXCEEDED",
    "child_step_key",
]


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _replace_strings(value: Any, replacement: str) -> Any:
    if isinstance(value, str):
        return replacement
    if isinstance(value, dict):
        return {key: _replace_strings(item, replacement) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, replacement) for item in value]
    return value
