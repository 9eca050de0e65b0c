"""Workspace roles as django-guardian object permissions. Every guardian call lives here.

A role grants a set of permissions on the Workspace object; every queryset in views, admin,
API and consumers is narrowed by `scope`, so an object of another workspace is simply not
found (a 404, never a 403 that confirms it exists). Superusers see everything, as Django's
convention has it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from guardian.models import GroupObjectPermission, UserObjectPermission
from guardian.shortcuts import assign_perm, get_users_with_perms, remove_perm

from entities.models import Membership, Role, Workspace
from governance.audit import audit_record
from governance.models import AuditAction

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


def _active(user: Any) -> bool:
    return user is not None and user.is_authenticated and user.is_active


def allowed_workspace_ids(user: Any, perm: str = VIEW) -> frozenset[int]:
    """Ids of the workspaces where the user holds `perm`.

    Every workspace permission of the user is read at once (its own and its groups') and kept
    on the user object; a request's user object lives for one request, so this is a
    per-request cache, as Django's own permission cache is. The membership services clear it
    on the user object they change."""
    if not _active(user):
        return frozenset()
    cache = user.__dict__.get("_hierarch_workspace_ids")
    if cache is None:
        content_type = ContentType.objects.get_for_model(Workspace)
        rows = UserObjectPermission.objects.filter(
            user=user, content_type=content_type
        ).values_list("permission__codename", "object_pk")
        group_rows = GroupObjectPermission.objects.filter(
            group__in=user.groups.all(), content_type=content_type
        ).values_list("permission__codename", "object_pk")
        found: dict[str, set[int]] = {}
        for codename, object_pk in [*rows, *group_rows]:
            found.setdefault(codename, set()).add(int(object_pk))
        cache = {codename: frozenset(ids) for codename, ids in found.items()}
        user.__dict__["_hierarch_workspace_ids"] = cache
    return cache.get(perm, frozenset())


def workspaces_for(user: Any, perm: str = VIEW) -> QuerySet[Workspace]:
    """The workspaces where the user holds `perm`."""
    if not _active(user):
        return Workspace.objects.none()
    if user.is_superuser:
        return Workspace.objects.all()
    return Workspace.objects.filter(pk__in=allowed_workspace_ids(user, perm))


def scope(queryset: QuerySet, user: Any, perm: str = VIEW, *, field: str = "workspace") -> QuerySet:
    """Narrow any queryset to the objects of workspaces where the user holds `perm`.

    `field` is the lookup from the model to its Workspace (`workspace`, `parent__workspace`,
    or `""` for a queryset of workspaces).
    """
    if _active(user) and user.is_superuser:
        return queryset
    lookup = f"{field}__in" if field else "pk__in"
    return queryset.filter(**{lookup: allowed_workspace_ids(user, perm)})


def visible_or_404(queryset: QuerySet, what: str, pk: Any) -> Any:
    """The object of a scoped queryset, or a 404 that names what was asked for and says the
    same whether it does not exist or is another workspace's."""
    try:
        found = queryset.filter(pk=pk).first()
    except (ValueError, TypeError, ValidationError):  # not an id of this kind at all
        found = None
    if found is None:
        raise Http404(f"no {what} {pk} in your workspaces")
    return found


def has_perm(user: Any, perm: str, workspace: Workspace) -> bool:
    return has_perm_in(user, perm, workspace_id=workspace.pk)


def has_perm_in(user: Any, perm: str, *, workspace_id: int) -> bool:
    """has_perm for a workspace known by its id (a page that read only the id)."""
    if not _active(user):
        return False
    if user.is_superuser:
        return True
    return workspace_id in allowed_workspace_ids(user, perm)


def users_with(workspace: Workspace, perm: str) -> list[Any]:
    """The active users who hold `perm` in the workspace (directly or through a group)."""
    users = get_users_with_perms(
        workspace, only_with_perms_in=[perm], with_group_users=True, with_superusers=False
    )
    return [user for user in users if user.is_active]


def has_any_membership(user: Any) -> bool:
    return _active(user) and (user.is_superuser or bool(allowed_workspace_ids(user, VIEW)))


def _forget(user: Any) -> None:
    user.__dict__.pop("_hierarch_workspace_ids", None)


def membership_grant(
    *, workspace: Workspace, user: Any, role: str, actor: Any = None
) -> Membership:
    """Give `user` the role in the workspace (idempotent); `actor` is who grants it (None:
    the system), for the audit log."""
    if role not in ROLE_PERMISSIONS:
        raise ValueError(f"{role!r} is not a role; use one of {', '.join(ROLE_PERMISSIONS)}")
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            workspace=workspace, user=user, role=role
        )
        for perm in ROLE_PERMISSIONS[role]:
            assign_perm(_codename(perm), user, workspace)
        if created:
            audit_record(
                workspace=workspace,
                action=AuditAction.MEMBERSHIP_GRANTED,
                actor=actor,
                target=membership,
                after={"user": user.get_username(), "role": role},
            )
    _forget(user)
    return membership


def membership_revoke(*, membership: Membership, actor: Any = None) -> None:
    """Take one role away; permissions another remaining role still grants are kept."""
    with transaction.atomic():
        workspace, user = membership.workspace, membership.user
        audit_record(
            workspace=workspace,
            action=AuditAction.MEMBERSHIP_REVOKED,
            actor=actor,
            target=membership,
            before={"user": user.get_username(), "role": membership.role},
        )
        membership.delete()
        remaining = set(
            Membership.objects.filter(workspace=workspace, user=user).values_list("role", flat=True)
        )
        still_granted = {perm for role in remaining for perm in ROLE_PERMISSIONS[role]}
        for perm in ROLE_PERMISSIONS[membership.role]:
            if perm not in still_granted:
                remove_perm(_codename(perm), user, workspace)
    _forget(user)


def roles_of(user: Any, workspace: Workspace) -> list[str]:
    return list(
        Membership.objects.filter(workspace=workspace, user=user).values_list("role", flat=True)
    )
