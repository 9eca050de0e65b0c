"""Reads of approvals, scoped to the user: a request of another workspace is not found."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from approvals.models import OPEN, Approval, ApprovalStatus
from approvals.notifications import approval_link
from governance.permissions import ADMINISTER, APPROVE, VIEW, allowed_workspace_ids
from runs.approval_desk import Decided, HumanWait, RequestShown


def _workspaces(user: Any, perm: str) -> frozenset[int] | None:
    """Workspace ids where the user holds `perm`; None for a superuser (every workspace)."""
    if not (user and user.is_authenticated and user.is_active):
        return frozenset()
    if user.is_superuser:
        return None
    return allowed_workspace_ids(user, perm)


def approvals_visible_to(user: Any) -> QuerySet[Approval]:
    """Every request of the workspaces the user can see (history included)."""
    ids = _workspaces(user, VIEW)
    qs = Approval.objects.select_related("workspace", "entity", "responded_by")
    return qs if ids is None else qs.filter(workspace_id__in=ids)


def approvals_open_for(user: Any) -> QuerySet[Approval]:
    """The requests the user may decide now: pending ones where they approve, escalated ones
    where they administer."""
    approve, administer = _workspaces(user, APPROVE), _workspaces(user, ADMINISTER)
    qs = Approval.objects.filter(status__in=OPEN, approval_required=True)
    if approve is None:  # a superuser
        return qs.select_related("workspace", "entity")
    return qs.filter(
        Q(status=ApprovalStatus.PENDING, workspace_id__in=approve)
        | Q(status=ApprovalStatus.ESCALATED, workspace_id__in=administer)
    ).select_related("workspace", "entity")


def approval_get(user: Any, pk: Any) -> Approval:
    """One request the user can see, else 404 (never a 403 that confirms it exists)."""
    try:
        return approvals_visible_to(user).get(pk=int(pk))
    except (Approval.DoesNotExist, ValueError, TypeError):
        raise Http404("no such approval request") from None


def approvals_visible_by_id(user: Any, ids: list[int]) -> dict[int, Approval | None]:
    """The requests of `ids` the user can see, in the order asked, None for each one they
    cannot (another workspace's, or none at all: the two read the same)."""
    found = {a.pk: a for a in approvals_visible_to(user).filter(pk__in=ids)}
    return {pk: found.get(pk) for pk in ids}


# -- for the run store (runs/approval_desk.py): not scoped, the engine reads its own runs ------


def approval_decided(*, run_id: str, key: str) -> Decided | None:
    """The run's request `key` as the engine reads it back, or None when never asked."""
    row = (
        Approval.objects.filter(run_id=run_id, key=key)
        .values(
            "status",
            "decision",
            "approved_payload",
            "reviewer_notes",
            "locked_constraint",
            "timeout_action",
            "escalated_at",
            "responded_by__username",
        )
        .first()
    )
    if row is None:
        return None
    return Decided(
        status=row["status"],
        decision=row["decision"],
        approved_payload=row["approved_payload"],
        reviewer_notes=row["reviewer_notes"],
        locked_constraint=row["locked_constraint"],
        timeout_action=row["timeout_action"],
        escalated=row["escalated_at"] is not None,
        decided_by=row["responded_by__username"] or "",
    )


def approvals_open_in_trace(*, trace_id: str) -> bool:
    """Whether a request of the trace still waits on a person."""
    return Approval.objects.filter(trace_id=trace_id, status__in=OPEN).exists()


def approvals_open_traces() -> QuerySet:
    """The trace ids with a request still waiting on a person (a subquery)."""
    return Approval.objects.filter(status__in=OPEN).values("trace_id")


def approvals_of_run(*, run_id: Any) -> list[RequestShown]:
    """The run's requests, oldest first, as its trace page lists them."""
    rows = Approval.objects.filter(run_id=run_id).order_by("requested_at")
    return [_shown(approval) for approval in rows]


def approval_waits_of_runs(*, trace_id: Any, run_ids: list[Any]) -> list[HumanWait]:
    """Each request's span of waiting, for the runs named (of one trace), oldest first; a
    request closed without a decision time counts as still open (its run's end bounds it)."""
    rows = (
        Approval.objects.filter(trace_id=trace_id, run_id__in=run_ids)
        .order_by("requested_at", "id")
        .values_list("run_id", "requested_at", "responded_at")
    )
    return [
        HumanWait(run_id=str(run), requested_at=asked, ended_at=ended) for run, asked, ended in rows
    ]


def approval_first_open_in_trace(*, trace_id: Any) -> RequestShown | None:
    """A request of the trace still waiting on a person, if there is one."""
    approval = Approval.objects.filter(trace_id=trace_id, status__in=OPEN).first()
    return None if approval is None else _shown(approval)


def approvals_open_by_run(*, trace_id: Any) -> dict[str, RequestShown]:
    """The first request still waiting on a person of each run of the trace, by run id.
    One query."""
    rows = Approval.objects.filter(trace_id=trace_id, status__in=OPEN).order_by("-requested_at")
    # Newest first, so the oldest request of a run is the one kept.
    return {str(approval.run_id): _shown(approval) for approval in rows}


def _shown(approval: Approval) -> RequestShown:
    return RequestShown(
        id=approval.pk,
        trigger=approval.checkpoint_trigger,
        trigger_label=approval.get_checkpoint_trigger_display(),
        step_name=approval.step_name,
        status=approval.status,
        status_label=approval.get_status_display(),
        link=approval_link(approval),
        address=approval_link(approval, absolute=True),
    )
