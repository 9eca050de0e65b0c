"""Workspace roles as django-guardian object permissions. Every guardian call lives here.

A role grants a set of permissions on the Workspace object; every queryset in views, admin,
API and consumers is narrowed by `scope`, so an object of another workspace is simply not
found (a 404, never a 403 that confirms it exists). Superusers see everything, as Django's
convention has it.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from guardian.shortcuts import assign_perm, get_objects_for_user, remove_perm

from entities.models import Membership, Role, Workspace

VIEW = "view_workspace"
DESIGN = "design_workspace"
OPERATE = "operate_workspace"
APPROVE = "approve_workspace"
ADMINISTER = "administer_workspace"

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    Role.VIEWER: (VIEW,),
    Role.DESIGNER: (VIEW, DESIGN),
    Role.OPERATOR: (VIEW, OPERATE),
    Role.APPROVER: (VIEW, APPROVE),
    Role.ADMIN: (VIEW, DESIGN, OPERATE, APPROVE, ADMINISTER),
}


def _codename(perm: str) -> str:
    return f"entities.{perm}"


def workspaces_for(user: Any, perm: str = VIEW) -> QuerySet[Workspace]:
    """The workspaces where the user holds `perm`."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Workspace.objects.none()
    if user.is_superuser:
        return Workspace.objects.all()
    return get_objects_for_user(user, _codename(perm), klass=Workspace, accept_global_perms=False)


def scope(queryset: QuerySet, user: Any, perm: str = VIEW, *, field: str = "workspace") -> QuerySet:
    """Narrow any queryset to the objects of workspaces where the user holds `perm`.

    `field` is the lookup from the model to its Workspace (`workspace`, `parent__workspace`,
    or `""` for a queryset of workspaces).
    """
    if user is not None and user.is_authenticated and user.is_active and user.is_superuser:
        return queryset
    allowed = workspaces_for(user, perm).values("pk")
    lookup = f"{field}__in" if field else "pk__in"
    return queryset.filter(**{lookup: allowed})


def has_perm(user: Any, perm: str, workspace: Workspace) -> bool:
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return user.has_perm(_codename(perm), workspace)


def has_any_membership(user: Any) -> bool:
    return workspaces_for(user).exists()


def membership_grant(*, workspace: Workspace, user: Any, role: str) -> Membership:
    """Give `user` the role in the workspace (idempotent)."""
    if role not in ROLE_PERMISSIONS:
        raise ValueError(f"{role!r} is not a role; use one of {', '.join(ROLE_PERMISSIONS)}")
    with transaction.atomic():
        membership, _ = Membership.objects.get_or_create(workspace=workspace, user=user, role=role)
        for perm in ROLE_PERMISSIONS[role]:
            assign_perm(_codename(perm), user, workspace)
    return membership


def membership_revoke(*, membership: Membership) -> None:
    """Take one role away; permissions another remaining role still grants are kept."""
    with transaction.atomic():
        workspace, user = membership.workspace, membership.user
        membership.delete()
        remaining = set(
            Membership.objects.filter(workspace=workspace, user=user).values_list("role", flat=True)
        )
        still_granted = {perm for role in remaining for perm in ROLE_PERMISSIONS[role]}
        for perm in ROLE_PERMISSIONS[membership.role]:
            if perm not in still_granted:
                remove_perm(_codename(perm), user, workspace)


def roles_of(user: Any, workspace: Workspace) -> list[str]:
    return list(
        Membership.objects.filter(workspace=workspace, user=user).values_list("role", flat=True)
    )
