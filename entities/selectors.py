"""Reads of entities, scoped to what the user may see."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Q, QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from entities.exchange import definition_of, with_relations
from entities.models import Entity, EntityStatus, EntityVersion, Workspace
from governance.permissions import OPERATE, VIEW, scope, visible_or_404


def entity_list(*, user: Any, perm: str = VIEW) -> QuerySet[Entity]:
    return scope(Entity.objects.select_related("workspace"), user, perm)


def entity_get(*, user: Any, pk: Any, perm: str = VIEW) -> Entity:
    """The entity, or a 404 when it does not exist or belongs to another workspace."""
    return visible_or_404(entity_list(user=user, perm=perm), "entity", pk)


def entity_startable_list(*, user: Any, search: str = "") -> QuerySet[Entity]:
    """The active entities of the workspaces where the user operates (what they may run),
    matching `search` in name, display name or description; by workspace, then name."""
    entities = entity_list(user=user, perm=OPERATE).filter(status=EntityStatus.ACTIVE)
    if search:
        entities = entities.filter(
            Q(name__icontains=search)
            | Q(display_name__icontains=search)
            | Q(description__icontains=search)
        )
    return entities.order_by("workspace__name", "name")


def workspace_list(*, user: Any, perm: str = VIEW) -> QuerySet[Workspace]:
    """The workspaces where the user holds `perm`, by name."""
    return scope(Workspace.objects.all(), user, perm, field="").order_by("name")


def workspace_get(*, user: Any, slug: str, perm: str = VIEW) -> Workspace:
    return get_object_or_404(scope(Workspace.objects.all(), user, perm, field=""), slug=slug)


def version_list(*, user: Any, perm: str = VIEW) -> QuerySet[EntityVersion]:
    return scope(
        EntityVersion.objects.select_related("entity", "entity__workspace"),
        user,
        perm,
        field="entity__workspace",
    )


def workspace_find(*, user: Any, ref: Any, perm: str = VIEW) -> Workspace | None:
    """The user's workspace whose id or slug is `ref`, or None: a workspace the user cannot
    see is answered exactly like one that does not exist."""
    ref = str(ref).strip()
    mine = scope(Workspace.objects.all(), user, perm, field="")
    found = mine.filter(pk=int(ref)) if ref.isascii() and ref.isdecimal() else mine.filter(slug=ref)
    return found.first()


def entity_find(*, workspace: Workspace, ref: str) -> Entity | None:
    """The workspace's entity whose id, string id (`external_id`) or name is `ref`."""
    entities = Entity.objects.filter(workspace=workspace)
    try:
        found = entities.filter(pk=uuid.UUID(ref)).first()
    except ValueError:
        found = None
    return found or entities.filter(external_id=ref).first() or entities.filter(name=ref).first()


def entity_in_workspace(*, user: Any, workspace: Workspace, pk: Any, perm: str = VIEW) -> Entity:
    """The workspace's entity, or a 404 when it does not exist, is another workspace's, or the
    user may not see it."""
    entity = entity_get(user=user, pk=pk, perm=perm)
    if entity.workspace_id != workspace.pk:
        raise Http404("No such entity in this workspace.")
    return entity


def entity_parent_list(*, entity: Entity) -> list[Entity]:
    """The entities that have `entity` as a child, by name."""
    return list(Entity.objects.filter(child_links__child=entity).distinct().order_by("name"))


def entity_definition(*, entity: Entity) -> dict:
    """The entity's definition in the exchange format, as it is saved now."""
    fresh = with_relations(Entity.objects.filter(pk=entity.pk)).get()
    return definition_of(fresh)


def entity_version_list(*, entity: Entity) -> QuerySet[EntityVersion]:
    """The entity's versions, newest first (the caller already checked the entity is
    visible)."""
    return (
        EntityVersion.objects.filter(entity=entity)
        .select_related("created_by")
        .order_by("-created_at", "-id")
    )


def entity_version_get(*, entity: Entity, version: str) -> EntityVersion:
    """One version of the entity by its SemVer, or a 404."""
    return get_object_or_404(entity_version_list(entity=entity), version=version)
