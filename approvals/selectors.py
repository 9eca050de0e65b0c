"""Reads of approvals, scoped to the user: a request of another workspace is not found."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404

from approvals.models import OPEN, Approval, ApprovalStatus
from governance.permissions import ADMINISTER, APPROVE, VIEW, allowed_workspace_ids


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
