"""Reads of entities, scoped to what the user may see."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from entities.models import Entity, EntityVersion, Workspace
from governance.permissions import VIEW, scope


def entity_list(*, user: Any, perm: str = VIEW) -> QuerySet[Entity]:
    return scope(Entity.objects.select_related("workspace"), user, perm)


def entity_get(*, user: Any, pk: Any, perm: str = VIEW) -> Entity:
    """The entity, or a 404 when it does not exist or belongs to another workspace."""
    return get_object_or_404(entity_list(user=user, perm=perm), pk=pk)


def workspace_get(*, user: Any, slug: str, perm: str = VIEW) -> Workspace:
    return get_object_or_404(scope(Workspace.objects.all(), user, perm, field=""), slug=slug)


def version_list(*, user: Any, perm: str = VIEW) -> QuerySet[EntityVersion]:
    return scope(
        EntityVersion.objects.select_related("entity", "entity__workspace"),
        user,
        perm,
        field="entity__workspace",
    )
