"""What runs ask of approvals: the port the ORM store and the run services reach people by.

Approvals sits above runs (its decisions resume runs through `runs.services.run_resume`), so
runs never imports it: the approvals app hands its implementation over when it is ready
(`approvals/apps.py`, `approvals/desk.py`), and `runs/engine_factory.py` gives it to the store.
Approvals owns its rows: creating a request, its inbox broadcast and notifications, reading a
decision, the judge's record, closing the requests of ended runs, and the requests a run's pages
and commands show (the run admin's inline is added by approvals/admin.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runs.engine import hitl


@dataclass(frozen=True)
class ApprovalRequest:
    """A request for a person, as the store asks for it: the ask, the run it belongs to, and
    what the store worked out (risk, cost, sealed copies of what a person reads)."""

    run_id: str
    workspace_id: int
    entity_id: Any
    trace_id: str
    ask: hitl.ApprovalAsk
    # subject, payload, context_snapshot, reasoning_summary, alternatives: as pii_handling
    # says to store them
    sealed: dict[str, Any]
    risk_level: str
    risk_factors: list[Any]
    cost_estimate: dict[str, Any]
    time_to_complete: Any
    now: datetime


@dataclass(frozen=True)
class Decided:
    """A request's row as the engine reads it back (payload as stored: the store opens it)."""

    status: str
    decision: str | None
    approved_payload: Any
    reviewer_notes: str
    locked_constraint: dict | None
    timeout_action: str
    escalated: bool
    decided_by: str


@dataclass(frozen=True)
class RequestShown:
    """A request to a person as the run's pages and commands show it."""

    id: int
    trigger: str  # the checkpoint trigger, and below as a person reads it
    trigger_label: str
    step_name: str
    status: str
    status_label: str
    link: str  # its page in the inbox
    address: str  # the same with the console's address, for a message


@dataclass(frozen=True)
class HumanWait:
    """A time a run waited on a person: from its request to the decision, the timeout or the
    request's close (`ended_at` None while the request is still open)."""

    run_id: str
    requested_at: datetime
    ended_at: datetime | None


class ApprovalDesk(Protocol):
    def request(self, request: ApprovalRequest) -> int:
        """Inside the caller's transaction: record the request (a replay of the same key
        keeps the first), tell the inbox and the notification channels after commit;
        answers the request's id."""
        ...

    def decided(self, *, run_id: str, key: str) -> Decided | None: ...

    def any_open(self, *, trace_id: str) -> bool:
        """Whether a person has a request of the trace still to decide."""
        ...

    def open_traces(self) -> Any:
        """The ids of the traces with a request still open, as a query the caller's query
        can take in (`trace_id__in=`)."""
        ...

    def requests_of_run(self, *, run_id: Any) -> list[RequestShown]:
        """The run's requests, oldest first, decided or not."""
        ...

    def waits_of_runs(self, *, trace_id: Any, run_ids: list[Any]) -> list[HumanWait]:
        """When each of the runs (of the trace) waited on a person, oldest first: the
        timeline draws these spans apart from the work. One query."""
        ...

    def first_open(self, *, trace_id: Any) -> RequestShown | None:
        """A request of the trace still waiting on a person, if there is one."""
        ...

    def open_by_run(self, *, trace_id: Any) -> dict[str, RequestShown]:
        """The first request still to decide of each run of the trace, by run id. One
        query."""
        ...

    def judge_record(self, *, run_id: str, key: str, verdict: dict[str, Any]) -> None:
        """Keep a judge's verdict on a review attempt (a replay keeps the first)."""
        ...

    def close_for_runs(self, run_ids: list[Any]) -> int:
        """Close the open requests of runs that were cancelled or ended."""
        ...


_installed: ApprovalDesk | None = None


def approval_desk_install(desk: ApprovalDesk) -> None:
    """The approvals app's implementation (called once, from its AppConfig.ready)."""
    global _installed
    _installed = desk


def approval_desk() -> ApprovalDesk:
    if _installed is None:
        raise RuntimeError("no approval desk: the approvals app is not in INSTALLED_APPS")
    return _installed
