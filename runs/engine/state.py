"""A run as the engine sees it: the run, its step records, its events, its children."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, get_args

from runs.engine import observability
from runs.engine.definition import Definition

if TYPE_CHECKING:
    from runs.engine.ports import ModelReply, ToolInvocation, ToolResult

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
HISTORY_KEY = "_iterations"  # the outputs of earlier passes, for loop control
# SUMMARIZED loop context: {"text": the model's summary, "iterations": how many of the
# passes kept under HISTORY_KEY it took in} (runs/engine/summaries.py).
SUMMARY_KEY = "_iterations_summary"
REVIEW_RETRIES_KEY = "_review_retries"
# Where the next pass of a run that ran out of passes starts, once a person gives it more.
RESTART_AT_KEY = "_next_pass_at"
# The children of the group under way that declare `state_contract.writes_to`: step key ->
# the keys their output may write at the top of this run's state.
WRITES_KEY = "_writes_to"


@dataclass(frozen=True)
class StepRecord:
    """One attempt of a step in one pass, as the store writes it (a `StepRun` row), frozen
    as `RunView` is: a step's outcome is a new record (`completed`, `failed`, `waiting`,
    or `changed`), bound where the engine goes on from it, never the old one changed.

    Not slotted, for `RunView`'s reason: `changed` copies the `__dict__`."""

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

    def changed(self, **changes: Any) -> StepRecord:
        """This record with `changes` to its fields: what `dataclasses.replace` answers,
        without running `__init__` again."""
        unknown = changes.keys() - _STEP_FIELD_NAMES
        if unknown:
            raise TypeError(f"StepRecord has no field {', '.join(sorted(unknown))}")
        record = object.__new__(StepRecord)
        record.__dict__.update(self.__dict__, **changes)  # before anyone sees it
        return record

    def with_input(self, value: Any) -> StepRecord:
        """The record with what the step was given (a prompt, a tool call's arguments)."""
        return self.changed(input=value)

    def completed(self, output: Any) -> StepRecord:
        """The step finished with `output`."""
        return self.changed(status="COMPLETED", output=output)

    def failed(self, code: str, message: str) -> StepRecord:
        """The step failed with an error code and why."""
        return self.changed(status="FAILED", error_code=code, error_message=message)

    def waiting(self, detail: str | None = None) -> StepRecord:
        """The step waits (on a person, a limit with no room, a rate limit's turn); `detail`
        says why when given, else the record's error, if any, stays: the failure it waits
        to try again after."""
        if detail is None:
            return self.changed(status="WAITING")
        return self.changed(status="WAITING", error_message=detail)


_STEP_FIELD_NAMES = frozenset(f.name for f in fields(StepRecord))


# Every kind of event a trace records (`RunEvent.type`): what the trace page, its websocket
# and anyone reading a run's events may meet. A closed set: the engine's are checked by mypy,
# the services' (`run_note`, `run_resume`) when they are called.
EventKind = Literal[
    # the run
    "run.created",  # a root or child run: run_id, entity, type, parent_id
    "run.status",  # RUNNING, a pause, BLOCKED or an end: status, with error_code/reason
    "cost.alert",  # the run's cost crossed its alert threshold: run_id
    "run.hired",  # a hirer started a subordinate: step, role, template
    "run.fired",  # a subordinate was fired: reason, by
    # its plan
    "plan.ready",  # steps
    "plan.reconciled",  # a dynamic plan checked against the static one: steps, notes
    "plan.replanned",  # after a failed review: reason
    "plan.edited",  # by a person at a plan checkpoint: steps, by
    # its steps
    "step.started",  # step, type
    "step.finished",  # step, status (error)
    "step.skipped",  # step, reason
    "step.retry",  # step, attempt
    "step.rate_limited",  # step, delay_s
    "step.exit",  # a conditional exit taken: step, to
    "state.changed",  # audit_level COMPREHENSIVE: step, keys
    "loop.next",  # another pass of the plan: iteration
    "loop.stopped",  # iteration, reason
    "context.trimmed",  # parts dropped to fit max_context_tokens: dropped
    "memory.summarized",  # the oldest memory items folded into a summary: items, kept
    "memory.not_summarized",  # a fold's summary call failed or had no room: reason
    "safety.flagged",  # a content filter's finding: step, kinds, action
    # its calls
    "llm.call",  # step, model, tokens, cost_usd, latency_ms
    "tool.call",  # step, tool_id, success, latency_ms
    "tool.arguments_edited",  # by a person at a checkpoint: step, by
    # its review and its people
    "review.passed",  # criteria, or by (a person)
    "review.failed",  # detail, on_failure
    "review.escalated",  # detail
    "output.edited",  # by a person at the output review: by
    "approval.requested",  # a request that stops the run until a person decides
    "approval.noted",  # a notice that does not stop it
    "approval.decided",  # decision, by
    "approval.escalated",  # the request went to the next approvers
    "approval.timed_out",  # its time ran out: what happened then
    "constraint.locked",  # a person locked a constraint for the rest of the run: constraint, by
]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))

Event = tuple[EventKind, dict[str, Any]]  # kind, JSON payload


@dataclass
class Events:
    items: list[Event] = field(default_factory=list)

    def add(self, kind: EventKind, **payload: Any) -> None:
        self.items.append((kind, payload))


@dataclass(frozen=True)
class RunView:
    """A run as the engine sees it, frozen: the store loads it, the engine's steps answer a
    new view for every change (`changed`, or the named changes below), and the store hands
    back the view as it wrote it. Its containers are never changed in place either: a
    change builds a new dict or list (shallow; the values inside are shared).

    Not slotted: a view is copied some thirty times a node, and copying its `__dict__`
    (`changed`) costs a tenth of `dataclasses.replace` on a slotted one."""

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
    trial: bool = False  # a designer's trial: drafts run too (so do the runs under it)
    sandbox: bool = False  # every tool call is sandboxed: no external effect
    passes_granted: int = 0  # passes a person gave it past its loop's limit (run_grant_passes)
    # Its trace outside Hierarch (the OpenTelemetry export, the traceparent of its calls):
    # None for the trace's own id; a run below an entity that does not pass its trace on
    # has one of its own (runs/engine/observability.py).
    export_trace_id: str | None = None
    # The memory items the run's prompts read (oldest first), read once a claim; None: not yet.
    memory: list[Any] | None = None
    # The ORM store's note of the JSON values its last committed write left in the run's
    # row, by identity, so an unchanged plan is not sent again. The one container that
    # changes in place, on purpose: every view the engine derives from a loaded one shares
    # it, and a write that commits after the view was handed on still updates it.
    row_json: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def changed(self, **changes: Any) -> RunView:
        """This view with `changes` to its fields: what `dataclasses.replace` answers,
        without running `__init__` again (the engine's CPU per node is benchmarked)."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"RunView has no field {', '.join(sorted(unknown))}")
        view = object.__new__(RunView)
        view.__dict__.update(self.__dict__, **changes)  # the new view's, before anyone sees it
        return view

    def planned(self) -> list[dict[str, Any]]:
        """The run's plan, once it has one (the engine plans before it runs a step)."""
        if self.plan is None:
            raise ValueError(f"run {self.id} has no plan yet")
        return self.plan

    def at(self, cursor: int, *, attempt: int = 1) -> RunView:
        """The run moved to the step at `cursor` (its first attempt, unless said)."""
        return self.changed(cursor=cursor, attempt=attempt)

    def ended(self, status: str, code: str = "", message: str = "") -> RunView:
        """The run with a status and its error (an end, or BLOCKED)."""
        return self.changed(status=status, error_code=code, error_message=message)

    def with_state(self, **changes: Any) -> RunView:
        """The run's state with keys set (a new dict)."""
        return self.changed(state={**self.state, **changes})

    def without_state(self, key: str) -> RunView:
        """The run's state without `key` (a new dict)."""
        return self.changed(state={k: v for k, v in self.state.items() if k != key})

    def buffered(self, steps: list[StepRecord], items: list[Event]) -> RunView:
        """The run with records for the store's next write of it (each write takes them)."""
        if not steps and not items:
            return self
        return self.changed(
            pending_steps=[*self.pending_steps, *steps],
            pending_events=Events([*self.pending_events.items, *items]),
        )

    def noted(self, kind: EventKind, **payload: Any) -> RunView:
        """The run with an event for the store's next write of it."""
        return self.buffered([], [(kind, payload)])

    def traceparent(self, step: StepRecord) -> str:
        """The W3C `traceparent` of the calls `step` makes ("" when the entity's
        trace_id_propagation is false)."""
        return observability.traceparent(self, step)


_FIELD_NAMES = frozenset(f.name for f in fields(RunView))


@dataclass(frozen=True)
class ChildOutcome:
    run_id: str
    step_key: str
    status: str
    output: Any
    error_code: str
    error_message: str
    entity_name: str
    fired_reason: str | None = None  # a hired subordinate that was fired: why


@dataclass(frozen=True)
class ChildRequest:
    step_key: str
    group_index: int
    entity_ref: str
    input: dict[str, Any]
    state: dict[str, Any] | None = None  # what the child inherits (constraints a person locked)
    hire: Hire | None = None  # a subordinate hired at run time (runs/engine/hiring.py)


@dataclass(frozen=True)
class Hire:
    """What a hire records on the child run: the role and task given to it, why, and the
    budget it is given (reserved from the hirer's anchor; None: it spends the hirer's)."""

    role: str
    task: str
    reason: str
    budget_usd: Decimal | None = None


def child_step_key(step_key: str, iteration: int, attempt: int) -> str:
    """How a child run names the parent's step that started it: a retried group (a person
    approved another attempt after a failure) starts new children under a new name."""
    return f"{step_key}#{iteration}" if attempt <= 1 else f"{step_key}#{iteration}.{attempt}"


def take_pending(
    run: RunView, steps: list[StepRecord], events: list[Event]
) -> tuple[RunView, list[StepRecord], list[Event]]:
    """The view without the records the engine buffered for this write, then those records
    and the new ones (a later record of the same step and attempt replaces an earlier one
    in its place)."""
    merged_steps = {(s.key, s.iteration, s.attempt): s for s in [*run.pending_steps, *steps]}
    merged_events = [*run.pending_events.items, *events]
    if run.pending_steps or run.pending_events.items:
        run = run.changed(pending_steps=[], pending_events=Events())
    return run, list(merged_steps.values()), merged_events


# -- the payloads of the events the stores write for the engine (one shape, both stores) -----


def run_created(run_id: str, entity: str, type: str, parent_id: str | None = None) -> Event:  # noqa: A002
    """`run.created`: a root run (no `parent_id`) or a child run of `parent_id`."""
    payload: dict[str, Any] = {"run_id": run_id}
    if parent_id is not None:
        payload["parent_id"] = parent_id
    return "run.created", {**payload, "entity": entity, "type": type}


def llm_call(step: StepRecord, reply: ModelReply) -> Event:
    """`llm.call`: a model call recorded for `step`."""
    return "llm.call", {
        "step": step.name,
        "model": reply.model,
        "tokens": reply.prompt_tokens + reply.completion_tokens,
        "cost_usd": str(reply.cost_usd),
        "latency_ms": reply.latency_ms,
    }


def tool_call(step: StepRecord, invocation: ToolInvocation, result: ToolResult | None) -> Event:
    """`tool.call`: a tool call recorded for `step` (`result` None: it failed)."""
    return "tool.call", {
        "step": step.name,
        "tool_id": invocation.tool["tool_id"],
        "success": result is not None,
        "latency_ms": result.latency_ms if result else 0,
    }
