"""Reads of entities, scoped to what the user may see."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404

from entities.exchange import definition_of, with_relations
from entities.models import ChildLink, Entity, EntityStatus, EntityVersion, Workspace
from entities.validation import allowed_child_types
from entities.versioning import Upgrade, upgrade_of
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


def entity_parent_list(*, entity: Entity) -> list[Entity]:
    """The entities that have `entity` as a child, by name."""
    return list(Entity.objects.filter(child_links__child=entity).distinct().order_by("name"))


def entity_definition(*, entity: Entity) -> dict:
    """The entity's definition in the exchange format, as it is saved now."""
    fresh = with_relations(Entity.objects.filter(pk=entity.pk)).get()
    return definition_of(fresh)


@dataclass(frozen=True)
class LinkUpgrade:
    """A child link of an entity whose `version` misses a newer version of its child."""

    index: int  # the link's place in hierarchy.children
    child: Entity
    upgrade: Upgrade

    @property
    def path(self) -> str:
        return f"hierarchy.children[{self.index}]"


def link_upgrades(*, links: list[tuple[Any, str | None]]) -> list[Upgrade | None]:
    """For each link given as (its child's id, its `version`): the newer version of the
    child it misses, or None (a link without a version runs the newest). One query, for the
    children of the links that name a version only (none when no link does)."""
    ranged = {child_id for child_id, wanted in links if wanted and child_id is not None}
    if not ranged:
        return [None] * len(links)
    saved: dict[Any, list[tuple[str, str, str]]] = {}
    rows = (
        EntityVersion.objects.filter(entity_id__in=ranged)
        .order_by("created_at", "id")
        .values_list("entity_id", "version", "change", "summary")
    )
    for child_id, version, change, summary in rows:
        saved.setdefault(child_id, []).append((version, change, summary))
    return [
        upgrade_of(wanted, saved[child_id]) if child_id in saved and wanted else None
        for child_id, wanted in links
    ]


def entity_upgrades(*, entity: Entity) -> list[LinkUpgrade]:
    """The entity's child links that miss a newer version of their child, in link order
    (the caller already checked the entity is visible; its children are in its workspace)."""
    links = list(entity.child_links.select_related("child").order_by("order", "id"))
    found = link_upgrades(links=[(link.child_id, link.version or None) for link in links])
    return [
        LinkUpgrade(index=index, child=link.child, upgrade=upgrade)
        for index, (link, upgrade) in enumerate(zip(links, found, strict=True))
        if upgrade is not None
    ]


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


# The designer's tree. A workspace may hold thousands of entities, so the tree is read a
# level at a time and a page at a time, each node with the two counts its row shows.


def entity_in_workspace(*, user: Any, workspace: Workspace, pk: Any, perm: str = VIEW) -> Entity:
    """The entity of `workspace`, or a 404 (another workspace's entity is not found)."""
    return visible_or_404(
        entity_list(user=user, perm=perm).filter(workspace=workspace), "entity", pk
    )


def _count(links: QuerySet[ChildLink], group: str, counted: str) -> Coalesce:
    """How many distinct `counted` the links of the outer entity (by `group`) hold."""
    rows = (
        links.filter(**{group: OuterRef("pk")})
        .order_by()
        .values(group)
        .annotate(n=Count(counted, distinct=True))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


def with_tree_counts(entities: QuerySet[Entity]) -> QuerySet[Entity]:
    """Each entity with `child_count` (its links down) and `parent_count` (the distinct
    entities it is a child of: more than one is a reused entity)."""
    return entities.annotate(
        child_count=_count(ChildLink.objects.all(), "parent", "id"),
        parent_count=_count(ChildLink.objects.all(), "child", "parent"),
    )


# Processes first, then agents, skills, actions: the tree reads from the top level down.
TYPE_RANK = Case(
    When(type="PROCESS", then=Value(0)),
    When(type="AGENT", then=Value(1)),
    When(type="SKILL", then=Value(2)),
    default=Value(3),
    output_field=IntegerField(),
)


def tree_roots(*, workspace: Workspace) -> QuerySet[Entity]:
    """The entities no other entity holds, processes first, then by name. The caller has
    checked the workspace is the user's."""
    roots = Entity.objects.filter(workspace=workspace, parent_links__isnull=True)
    return with_tree_counts(roots).order_by(TYPE_RANK, "name")


def template_list(*, workspace: Workspace) -> QuerySet[Entity]:
    """The workspace's templates (`metadata_extensions.ui_hints.is_template`), processes
    first, then by name. The caller has checked the workspace is the user's."""
    return Entity.objects.filter(
        workspace=workspace, metadata_extensions__ui_hints__is_template=True
    ).order_by(TYPE_RANK, "name")


def tree_children(*, parent: Entity) -> QuerySet[ChildLink]:
    """The parent's links in order, each child with its counts (`child__…` is read through
    the link; the counts are on the link as `child_child_count`, `child_parent_count`)."""
    links = ChildLink.objects.all()
    child_count = (
        links.filter(parent=OuterRef("child"))
        .order_by()
        .values("parent")
        .annotate(n=Count("id"))
        .values("n")
    )
    parent_count = (
        links.filter(child=OuterRef("child"))
        .order_by()
        .values("child")
        .annotate(n=Count("parent", distinct=True))
        .values("n")
    )
    return (
        ChildLink.objects.filter(parent=parent)
        .select_related("child")
        .annotate(
            child_child_count=Coalesce(Subquery(child_count, output_field=IntegerField()), 0),
            child_parent_count=Coalesce(Subquery(parent_count, output_field=IntegerField()), 0),
        )
        .order_by("order", "id")
    )


def _matching(entities: QuerySet[Entity], text: str) -> QuerySet[Entity]:
    """Entities whose name, display name or a tag holds `text`. A NUL character matches
    nothing (PostgreSQL refuses it in a pattern)."""
    if "\x00" in text:
        return entities.none()
    return entities.filter(
        Q(name__icontains=text) | Q(display_name__icontains=text) | Q(tags__icontains=text)
    )


def _parents_map(workspace: Workspace) -> dict[Any, list[Any]]:
    """Each entity's parents, the earliest link first: the workspace's whole link graph in
    one query (ids only, cheap at thousands of links)."""
    parents: dict[Any, list[Any]] = {}
    rows = ChildLink.objects.filter(parent__workspace=workspace).order_by("id")
    for parent_id, child_id in rows.values_list("parent_id", "child_id"):
        parents.setdefault(child_id, []).append(parent_id)
    return parents


def tree_search(
    *, workspace: Workspace, text: str, limit: int = 20
) -> list[tuple[Entity, list[tuple[Any, str]]]]:
    """Up to `limit` entities matching `text`, each with the (id, name) of the entities on
    one path from a root down to it (the earliest parent at each level): where it sits."""
    matching = _matching(Entity.objects.filter(workspace=workspace), text)
    found = list(with_tree_counts(matching).order_by(TYPE_RANK, "name")[:limit])
    if not found:
        return []
    parents = _parents_map(workspace)
    paths: list[list[Any]] = []
    for entity in found:
        path, key, seen = [], entity.pk, {entity.pk}
        while parents.get(key):
            key = parents[key][0]
            if key in seen:  # validation forbids cycles; a search must not hang on one
                break
            seen.add(key)
            path.append(key)
        paths.append(list(reversed(path)))
    wanted = {key for path in paths for key in path}
    names = dict(Entity.objects.filter(pk__in=wanted).values_list("pk", "name")) if wanted else {}
    return [
        (entity, [(key, names[key]) for key in path])
        for entity, path in zip(found, paths, strict=True)
    ]


def child_candidates(*, parent: Entity, text: str, limit: int = 10) -> QuerySet[Entity]:
    """The entities of the parent's workspace that could be linked under it: matching
    `text`, of a type the type rule allows, neither the parent, one of its ancestors (a
    cycle) nor already its child."""
    types = allowed_child_types(parent.type)
    if not types:
        return Entity.objects.none()
    parents = _parents_map(parent.workspace)
    refused, frontier = {parent.pk}, [parent.pk]
    while frontier:
        for above in parents.get(frontier.pop(), []):
            if above not in refused:
                refused.add(above)
                frontier.append(above)
    refused.update(ChildLink.objects.filter(parent=parent).values_list("child_id", flat=True))
    entities = Entity.objects.filter(workspace=parent.workspace, type__in=types).exclude(
        pk__in=refused
    )
    return _matching(entities, text).order_by(TYPE_RANK, "name")[:limit]


# The designer's editor names children as a definition does (an id, a string id or a name)
# and offers the entities a child may be as one types.


def entities_by_ref(*, workspace: Workspace, refs: list[str]) -> dict[str, Entity]:
    """The workspace's entities named by `refs` (ids, string ids or names, as a definition's
    child_id may be), by the ref that named them, in one query; an id wins over a string id,
    a string id over a name, as `entity_find` resolves them."""
    refs = [ref for ref in dict.fromkeys(refs) if ref and "\x00" not in ref][:500]
    if not refs:
        return {}
    ids = []
    for ref in refs:
        with contextlib.suppress(ValueError):
            ids.append(uuid.UUID(ref))
    found = Entity.objects.filter(workspace=workspace).filter(
        Q(pk__in=ids) | Q(external_id__in=refs) | Q(name__in=refs)
    )
    by_id, by_external, by_name = {}, {}, {}
    for entity in found:
        by_id[str(entity.pk)] = entity
        if entity.external_id:
            by_external[entity.external_id] = entity
        by_name[entity.name] = entity
    named: dict[str, Entity] = {}
    for ref, key in ((ref, _uuid_text(ref)) for ref in refs):
        entity = by_id.get(key) or by_external.get(ref) or by_name.get(ref)
        if entity is not None:
            named[ref] = entity
    return named


def _uuid_text(ref: str) -> str:
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        return ""


def child_pick_list(
    *,
    workspace: Workspace,
    parent_type: str,
    text: str,
    parent: Entity | None = None,
    limit: int = 20,
) -> list[Entity]:
    """Up to `limit` entities of the workspace matching `text` that may be a child of an
    entity of `parent_type` (the type rule); for a saved parent, neither it, one of its
    ancestors (a cycle) nor one of its children already (as the tree's candidates)."""
    limit = max(0, min(limit, 20))
    if parent is not None:
        return list(child_candidates(parent=parent, text=text, limit=limit))
    types = allowed_child_types(parent_type)
    if not types:
        return []
    entities = Entity.objects.filter(workspace=workspace, type__in=types)
    return list(_matching(entities, text).order_by(TYPE_RANK, "name")[:limit])
