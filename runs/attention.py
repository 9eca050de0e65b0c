"""What a run waits for a person to do (DESIGN.md: "a run waiting on something a person must
do says so on its root: what blocks it and where to act").

A run of the trace that is BLOCKED (a limit ran out: its budget, its passes…) or PAUSED (a
person's decision) stops its ancestors too: they wait on it. `run_attention(run)` lists those
runs at or below `run`, each with the reason and where to act: the node on the trace page,
and the page and API call that move it on. What to do depends on the reason: a budget is
raised (at the run the budget is drawn from), a request is decided in the inbox; any other
block is looked at on its trace page. The run document, the runs list, the trace header,
`run_entity --wait` and the `run.needs_attention` webhook all read this one list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.urls import reverse

from runs.approval_desk import RequestShown, approval_desk
from runs.models import Run, RunStatus

# What stops the ancestors of a run until a person acts.
WAITING_ON_A_PERSON = (RunStatus.BLOCKED, RunStatus.PAUSED)
# At most this many are listed: a trace with more has a wider problem than a list shows.
MOST = 50
# The reason a PAUSED run gives: it waits on a person's decision of a request.
AWAITING_DECISION = "AWAITING_DECISION"


@dataclass(frozen=True)
class Act:
    """Where a person moves a waiting run on: in the console, and through the API."""

    what: str  # in words, for a person
    console_url: str  # absolute
    method: str | None = None  # the API call, when there is one
    path: str | None = None
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Attention:
    """One run that waits on a person, as the run document and the pages show it."""

    run_id: str
    entity_name: str
    status: str
    code: str  # the run's error code (BUDGET_EXHAUSTED…), or AWAITING_DECISION
    message: str  # may carry a model's words: escape it where it is shown
    console_url: str  # the run on its trace page, absolute
    act: Act
    approval_id: int | None = None
    trigger: str = ""  # the checkpoint that asked, for a request
    step: str = ""

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "run_id": self.run_id,
            "entity_name": self.entity_name,
            "status": self.status,
            "reason": {"code": self.code, "message": self.message},
            "console_url": self.console_url,
            "action": {
                "what": self.act.what,
                "console_url": self.act.console_url,
                "api": (
                    {"method": self.act.method, "path": self.act.path, "body": self.act.body}
                    if self.act.method
                    else None
                ),
            },
        }
        if self.approval_id is not None:
            found["approval"] = {
                "approval_id": self.approval_id,
                "trigger": self.trigger,
                "step": self.step,
            }
        return found


def absolute(path: str) -> str:
    """A path of the console with the server's address (HIERARCH_BASE_URL)."""
    return f"{settings.HIERARCH_BASE_URL.rstrip('/')}{path}"


def _trace_link(run_id: Any) -> str:
    return absolute(reverse("runs:detail", args=[run_id]))


@dataclass(frozen=True)
class _Row:
    run_id: str
    entity_name: str
    status: str
    code: str
    message: str
    budget_anchor: str | None


def _look_at_it(row: _Row) -> Act:
    """A block with no known remedy: the run's trace page says what happened."""
    return Act(
        what="See why the run stopped on its trace page", console_url=_trace_link(row.run_id)
    )


def _raise_budget(row: _Row) -> Act:
    """Out of budget: raise the budget the run draws from (which resumes it)."""
    anchor = row.budget_anchor
    if anchor is None:  # not a run's budget (an entity's lifetime spend): nothing to raise here
        return _look_at_it(row)
    return Act(
        what=f"Raise the budget of run {anchor} (max_cost_usd): the run resumes at its step",
        console_url=absolute(reverse("admin:runs_run_raise_budget", args=[anchor])),
        method="POST",
        path=reverse("api:run-raise-budget", args=[anchor]),
        body={"budget_usd": "<a larger amount in USD>"},
    )


def _more_passes(row: _Row) -> Act:
    """Out of passes before its loop was done: give it more (which resumes it)."""
    return Act(
        what="Give it more passes: the loop goes on where it stopped",
        console_url=_trace_link(row.run_id),
        method="POST",
        path=reverse("api:run-passes", args=[row.run_id]),
        body={"passes": 1},
    )


# What a person does for each reason a run is BLOCKED; any other reason: `_look_at_it`.
REMEDIES: dict[str, Callable[[_Row], Act]] = {
    "BUDGET_EXHAUSTED": _raise_budget,
    "MAX_PASSES_EXHAUSTED": _more_passes,
}


def _blocked(row: _Row) -> Attention:
    act = REMEDIES.get(row.code, _look_at_it)(row)
    return Attention(
        run_id=row.run_id,
        entity_name=row.entity_name,
        status=row.status,
        code=row.code,
        message=row.message,
        console_url=_trace_link(row.run_id),
        act=act,
    )


def _paused(row: _Row, request: RequestShown | None) -> Attention:
    if request is None:  # its request is being made or closed right now
        return Attention(
            run_id=row.run_id,
            entity_name=row.entity_name,
            status=row.status,
            code=AWAITING_DECISION,
            message="waits on a person",
            console_url=_trace_link(row.run_id),
            act=Act(what="Decide in the inbox", console_url=absolute(reverse("approvals:inbox"))),
        )
    where = f" at step {request.step_name}" if request.step_name else ""
    return Attention(
        run_id=row.run_id,
        entity_name=row.entity_name,
        status=row.status,
        code=AWAITING_DECISION,
        message=f"{request.trigger_label}{where}: a person decides",
        console_url=_trace_link(row.run_id),
        act=Act(
            what="Decide the request",
            console_url=request.address,
            method="POST",
            path=reverse("api:approval-decision", args=[request.id]),
            body={"decision": "approve | reject | edit | lock_constraint"},
        ),
        approval_id=request.id,
        trigger=request.trigger,
        step=request.step_name,
    )


def run_attention(run: Run) -> list[Attention]:
    """The runs at or below `run` (the run itself included) that are BLOCKED or PAUSED, the
    shallowest and oldest first, at most MOST: what the run waits on a person for. One query
    for the trace, and one for the requests when a run of it is PAUSED."""
    rows = (
        Run.objects.filter(trace_id=run.trace_id, status__in=WAITING_ON_A_PERSON)
        .order_by("depth", "created_at", "id")
        .values_list(
            "id",
            "status",
            "error_code",
            "error_message",
            "budget_anchor",
            "lineage",
            "entity__name",
        )[:MOST]
    )
    found = [
        _Row(
            run_id=str(pk),
            entity_name=name,
            status=status,
            code=code,
            message=message,
            budget_anchor=str(anchor) if anchor else None,
        )
        for pk, status, code, message, anchor, lineage, name in rows
        if run.parent_id is None or pk == run.pk or str(run.pk) in map(str, lineage or [])
    ]
    requests: dict[str, RequestShown] = {}
    if any(row.status == RunStatus.PAUSED for row in found):
        requests = approval_desk().open_by_run(trace_id=run.trace_id)
    return [
        _paused(row, requests.get(row.run_id)) if row.status == RunStatus.PAUSED else _blocked(row)
        for row in found
    ]


def attention_json(run: Run) -> list[dict[str, Any]]:
    """`run_attention` as the run document, `run_entity --wait` and the webhooks carry it."""
    return [item.as_json() for item in run_attention(run)]


def with_attention(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs`, each with `attention_run_id`: the first run of its trace that waits on a
    person (as `run_attention` orders them), else None. A subquery of the list's own query,
    not a query per row; a list shows it for root runs (the whole trace is theirs)."""
    first = (
        Run.objects.filter(trace_id=OuterRef("trace_id"), status__in=WAITING_ON_A_PERSON)
        .order_by("depth", "created_at", "id")
        .values("pk")[:1]
    )
    return runs.annotate(attention_run_id=Subquery(first))
