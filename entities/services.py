"""Every write to entities, their links, steps, versions and status.

`entities_save` is the one path: the admin, the import command and (later) the API call it
with definitions in the exchange format. It validates the whole batch against the workspace
as it would be after the save, and either writes everything in one transaction or raises
`DefinitionInvalid` with every problem and writes nothing.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import CharField, OuterRef, Subquery
from django.db.models.functions import Cast
from django.utils import timezone

from entities.definition import (
    DefinitionInvalid,
    Problem,
    is_tool_reference,
    normalize,
)
from entities.exchange import definition_of, labels_for, tools_of, with_relations
from entities.models import (
    ChildLink,
    Entity,
    EntityStatus,
    EntityStatusChange,
    EntityVersion,
    PlanStep,
    Workspace,
)
from entities.tool_catalog import tool_catalog
from entities.validation import Catalog, Draft, entity_key, graph_problems, lay_over
from entities.versioning import bump_version, classify
from governance.audit import audit_record, digest
from governance.models import AuditAction

# Which status may follow which (seed 000 §3.1: transitions are logged for compliance).
STATUS_TRANSITIONS: dict[str, set[str]] = {
    EntityStatus.DRAFT: {EntityStatus.ACTIVE, EntityStatus.ARCHIVED},
    EntityStatus.ACTIVE: {EntityStatus.DRAFT, EntityStatus.DEPRECATED, EntityStatus.ARCHIVED},
    EntityStatus.DEPRECATED: {EntityStatus.ACTIVE, EntityStatus.ARCHIVED},
    EntityStatus.ARCHIVED: {EntityStatus.DRAFT},
}


@dataclass
class SaveResult:
    entity: Entity
    created: bool
    version: EntityVersion | None  # None when the definition did not change

    @property
    def changed(self) -> bool:
        return self.created or self.version is not None


@dataclass
class _Item:
    raw: Any
    entity: Entity | None
    label: str
    definition: dict | None = None
    key: str = ""
    # What the entity was before the save, for the audit log.
    previous: dict | None = None
    before_status: str = ""


def entity_save(
    *,
    workspace: Workspace,
    definition: Any,
    user: Any = None,
    entity: Entity | None = None,
) -> SaveResult:
    """Create an entity, or update `entity`, from one definition."""
    return entities_save(
        workspace=workspace, definitions=[definition], user=user, targets=[entity], labels=[""]
    )[0]


def entity_validate(
    *, workspace: Workspace, definition: Any, entity: Entity | None = None
) -> list[Problem]:
    """Every problem `entity_save` would report, without writing. Inside a transaction it
    holds the workspace's design lock, so a save in the same transaction sees the same world."""
    with transaction.atomic():
        Workspace.objects.select_for_update().get(pk=workspace.pk)
        return _check(workspace, [_Item(raw=definition, entity=entity, label="")])


def entities_import(
    *, workspace: Workspace, definitions: list[Any], user: Any = None
) -> list[SaveResult]:
    """Import a bundle, all or nothing. Each definition updates the entity of the workspace
    whose id or string id (`external_id`) matches its `metadata.id`, or creates a new one."""
    targets = [_match(workspace, d) for d in definitions]
    return entities_save(
        workspace=workspace,
        definitions=definitions,
        user=user,
        targets=targets,
        labels=labels_for(definitions),
        keep_timestamps=True,
        audit_action=AuditAction.ENTITY_IMPORTED,
    )


def _match(workspace: Workspace, definition: Any) -> Entity | None:
    if not isinstance(definition, dict) or not isinstance(definition.get("metadata"), dict):
        return None
    ref = definition["metadata"].get("id")
    entities = Entity.objects.filter(workspace=workspace)
    if not ref:
        # A definition without an id updates the entity of the same name, so a hand-written
        # file can be imported again after an edit.
        identity = definition.get("identity")
        name = identity.get("name") if isinstance(identity, dict) else None
        return entities.filter(name=name).first() if isinstance(name, str) and name else None
    ref = str(ref)
    try:
        return entities.get(pk=uuid.UUID(ref))
    except (ValueError, Entity.DoesNotExist):
        pass
    return entities.filter(external_id=ref).first()


def entities_save(
    *,
    workspace: Workspace,
    definitions: list[Any],
    targets: list[Entity | None],
    labels: list[str],
    user: Any = None,
    keep_timestamps: bool = False,
    audit_action: str | None = None,
    audit_details: dict | list[dict | None] | None = None,
) -> list[SaveResult]:
    """Validate and write a batch of definitions; `targets[i]` is the entity to update.

    Each new version is audited as `audit_action` (by default entity.created or
    entity.updated, with `audit_details` added to the record's `after`: one dict for every
    record, or a list with one per definition), each status change as entity.status_changed."""
    with transaction.atomic():
        # One design-time writer per workspace at a time: two saves that each look fine
        # could together form a cycle.
        Workspace.objects.select_for_update().get(pk=workspace.pk)
        items = [
            _Item(raw=raw, entity=target, label=label)
            for raw, target, label in zip(definitions, targets, labels, strict=True)
        ]
        problems = _check(workspace, items)
        if problems:
            raise DefinitionInvalid(problems)
        results = _write(workspace, items, user=user, keep_timestamps=keep_timestamps)
        details = audit_details if isinstance(audit_details, list) else [audit_details] * len(items)
        for result, item, detail in zip(results, items, details, strict=True):
            _audit_save(result, item, user=user, action=audit_action, details=detail)
        return results


# Sections the workspace-wide checks read; a definition with a problem in one of them takes
# part in those checks only as a name others may refer to.
_GRAPH_SECTIONS = {
    "",
    "metadata",
    "identity",
    "hierarchy",
    "planning",
    "capabilities",
    "governance",
}


def _check(workspace: Workspace, items: list[_Item]) -> list[Problem]:
    """Every problem of the batch at once: each definition on its own, then the batch laid
    over the workspace (references, names, cycles, depth, budgets)."""
    problems: list[Problem] = []
    for item in items:
        if item.entity is not None:
            # Work from the row as it is now, not from the caller's possibly stale copy.
            item.entity = Entity.objects.get(pk=item.entity.pk, workspace=workspace)
    for index, item in enumerate(items):
        definition, found = normalize(item.raw)
        problems += [Problem(p.path, p.message, item.label) for p in found]
        item.key = entity_key(item.entity.pk) if item.entity else f"new:{index}"
        broken = {p.path.split(".")[0].split("[")[0] for p in found}
        item.definition = None if broken & _GRAPH_SECTIONS else definition
    seen_targets: dict[str, str] = {}
    for item in items:
        if item.entity is None:
            continue
        if item.key in seen_targets:
            problems.append(
                Problem(
                    "metadata.id",
                    f"{seen_targets[item.key]} already defines this entity",
                    item.label,
                )
            )
        seen_targets[item.key] = item.label or "another definition"

    usable = [item for item in items if item.definition is not None]
    for item in usable:
        problems += _lifecycle_problems(item)
    problems += _inline_tool_conflicts(usable)

    catalog = Catalog.load(workspace)
    drafts = [
        Draft(definition=item.definition, key=item.key, label=item.label)
        if item.definition is not None
        else Draft.placeholder(item.raw, key=item.key, label=item.label)
        for item in items
    ]
    problems += lay_over(catalog, drafts)
    problems += graph_problems(catalog, drafts)
    for item, draft in zip(items, drafts, strict=True):
        item.draft = draft  # type: ignore[attr-defined]
    items[0].catalog = catalog  # type: ignore[attr-defined]
    return problems


def _lifecycle_problems(item: _Item) -> list[Problem]:
    problems: list[Problem] = []
    entity, metadata = item.entity, item.definition["metadata"]
    if entity is None:
        return problems
    if metadata["type"] != entity.type:
        problems.append(
            Problem(
                "metadata.type",
                f"cannot change from {entity.type} to {metadata['type']}: an entity's type "
                "never changes; create a new entity instead",
                item.label,
            )
        )
    new_status = metadata["status"]
    if new_status != entity.status and new_status not in STATUS_TRANSITIONS[entity.status]:
        allowed = ", ".join(sorted(STATUS_TRANSITIONS[entity.status]))
        problems.append(
            Problem(
                "metadata.status",
                f"cannot go from {entity.status} to {new_status}; from {entity.status} an "
                f"entity can go to {allowed}",
                item.label,
            )
        )
    return problems


def _inline_tool_conflicts(items: list[_Item]) -> list[Problem]:
    problems: list[Problem] = []
    defined: dict[str, tuple[dict, str]] = {}
    for item in items:
        for index, tool in enumerate(item.definition["capabilities"]["tools"]):
            if is_tool_reference(tool):
                continue
            earlier = defined.get(tool["tool_id"])
            if earlier and earlier[0] != tool:
                problems.append(
                    Problem(
                        f"capabilities.tools[{index}]",
                        f"defines tool {tool['tool_id']!r} differently from "
                        f"{earlier[1] or 'another definition'}; define it once",
                        item.label,
                    )
                )
            defined.setdefault(tool["tool_id"], (tool, item.label))
    return problems


def _write(
    workspace: Workspace, items: list[_Item], *, user: Any, keep_timestamps: bool
) -> list[SaveResult]:
    now = timezone.now()
    catalog: Catalog = items[0].catalog  # type: ignore[attr-defined]
    for item in items:
        for tool in item.definition["capabilities"]["tools"]:
            if not is_tool_reference(tool):
                tool_catalog().tool_upsert(workspace=workspace, definition=tool)

    old_status = {item.key: item.entity.status for item in items if item.entity is not None}
    previous = _latest_definitions([item.entity for item in items if item.entity is not None])
    key_to_entity, created = _entity_rows_written(
        workspace, items, user=user, now=now, keep_timestamps=keep_timestamps
    )
    entity_for = _entity_resolver(items, key_to_entity)
    for item in items:
        _relations_written(key_to_entity[item.key], item, entity_for)
    _refresh_derived(workspace, catalog, key_to_entity)

    results: list[SaveResult] = []
    tools = tools_of(workspace)
    written = with_relations(Entity.objects.filter(pk__in=[e.pk for e in key_to_entity.values()]))
    fresh_by_pk = {entity.pk: entity for entity in written}
    for item in items:
        fresh = fresh_by_pk[key_to_entity[item.key].pk]
        before_status = old_status.get(item.key, "")
        if fresh.status != before_status:
            EntityStatusChange.objects.create(
                entity=fresh,
                from_status=before_status,
                to_status=fresh.status,
                changed_by=_user_or_none(user),
                reason="created" if not before_status else "",
            )
        before = None if item.key in created else previous.get(fresh.pk)
        version = _record_version(fresh, before, user=user, tools=tools, now=now)
        results.append(SaveResult(entity=fresh, created=item.key in created, version=version))
        item.previous, item.before_status = before, before_status
    return results


def _entity_rows_written(
    workspace: Workspace, items: list[_Item], *, user: Any, now: datetime, keep_timestamps: bool
) -> tuple[dict[str, Entity], set[str]]:
    """Each item's Entity row, created or updated from its definition's columns; answers the
    rows by key and the keys of the new ones."""
    key_to_entity: dict[str, Entity] = {}
    created: set[str] = set()
    for item in items:
        entity = item.entity
        if entity is None:
            entity = Entity(workspace=workspace, created_by=_user_or_none(user))
            created.add(item.key)
        _assign_columns(entity, item.definition, now=now, keep_timestamps=keep_timestamps)
        entity.save()
        key_to_entity[item.key] = entity
    return key_to_entity, created


def _entity_resolver(
    items: list[_Item], key_to_entity: dict[str, Entity]
) -> Callable[[str | None], Entity | None]:
    """The entity of a resolved key: one just written, or one outside the items (all read in
    one query)."""
    outside = {
        key
        for item in items
        for key in [item.draft.resolved_parent, *item.draft.resolved_children]  # type: ignore[attr-defined]
        + item.draft.resolved_step_targets  # type: ignore[attr-defined]
        if key is not None and key not in key_to_entity
    }
    others = {
        entity_key(e.pk): e
        for e in Entity.objects.filter(pk__in=[uuid.UUID(key) for key in outside])
    }

    def entity_for(key: str | None) -> Entity | None:
        if key is None:
            return None
        return key_to_entity.get(key) or others[key]

    return entity_for


def _relations_written(
    entity: Entity, item: _Item, entity_for: Callable[[str | None], Entity | None]
) -> None:
    """The entity's parent, child links and plan steps, as its definition resolved them."""
    draft: Draft = item.draft  # type: ignore[attr-defined]
    entity.parent = entity_for(draft.resolved_parent)
    entity.save(update_fields=["parent"])
    entity.child_links.all().delete()
    entity.plan_steps.all().delete()
    ChildLink.objects.bulk_create(
        ChildLink(
            parent=entity,
            child=entity_for(child_key),
            relationship=link["relationship"],
            condition=link["condition"],
            order=position,
            input_mapping=link["input_mapping"],
            version=link.get("version") or "",
        )
        for position, (link, child_key) in enumerate(
            zip(item.definition["hierarchy"]["children"], draft.resolved_children, strict=True),
            start=1,
        )
    )
    PlanStep.objects.bulk_create(
        PlanStep(
            entity=entity,
            step_id=step["step_id"],
            order=step["order"],
            name=step["name"],
            description=step["description"],
            type=step["type"],
            target_entity=entity_for(target_key),
            target_tool_id=step["target"]["tool_id"] or "",
            prompt_template=step["target"]["prompt_template"] or "",
            required=step["required"],
            exit_conditions=step["exit_conditions"],
            input_mapping=step["input_mapping"],
            hire=step["target"].get("hire"),
        )
        for step, target_key in zip(
            item.definition["planning"]["static_plan"]["steps"],
            draft.resolved_step_targets,
            strict=True,
        )
    )


def _audit_save(
    result: SaveResult, item: _Item, *, user: Any, action: str | None, details: dict | None
) -> None:
    """The audit records of one saved definition: its new version, its status change."""
    entity, previous, before_status = result.entity, item.previous, item.before_status
    if result.version is not None:
        if action is None:
            action = AuditAction.ENTITY_CREATED if result.created else AuditAction.ENTITY_UPDATED
        before = None
        if previous is not None:
            before = {
                "version": previous["metadata"].get("version"),
                "definition_sha256": digest(previous),
            }
        audit_record(
            workspace=entity.workspace_id,
            action=action,
            actor=user,
            target=entity,
            object_label=entity.name,
            before=before,
            after={
                "type": entity.type,
                "status": entity.status,
                "version": entity.version,
                "change": result.version.change,
                "summary": result.version.summary,
                # Pins the version snapshot: an edited EntityVersion no longer matches.
                "definition_sha256": digest(result.version.definition),
                **(details or {}),
            },
        )
    if before_status and entity.status != before_status:
        audit_record(
            workspace=entity.workspace_id,
            action=AuditAction.ENTITY_STATUS_CHANGED,
            actor=user,
            target=entity,
            object_label=entity.name,
            before={"status": before_status},
            after={"status": entity.status},
        )


def _latest_definitions(entities: list[Entity]) -> dict[Any, dict]:
    """The definition of each entity's latest version, in one query."""
    newest = EntityVersion.objects.filter(entity=OuterRef("entity")).order_by("-created_at", "-id")
    rows = EntityVersion.objects.filter(
        entity__in=entities, pk=Subquery(newest.values("pk")[:1])
    ).values_list("entity_id", "definition")
    return dict(rows)


def _assign_columns(entity: Entity, d: dict, *, now: datetime, keep_timestamps: bool) -> None:
    metadata, identity = d["metadata"], d["identity"]
    entity.type = metadata["type"]
    entity.status = metadata["status"]
    entity.tags = metadata["tags"]
    if entity._state.adding:
        own_id = metadata.get("id")
        if own_id:
            try:
                uuid.UUID(str(own_id))
                is_uuid = True
            except ValueError:
                is_uuid = False
            entity.external_id = str(own_id)
            if is_uuid and not Entity.objects.filter(pk=own_id).exists():
                entity.id = uuid.UUID(str(own_id))
        entity.version = metadata.get("version") or "1.0.0"
        entity.created_at = (
            _parse_time(metadata.get("created_at")) if keep_timestamps else None
        ) or now
        entity.updated_at = (
            _parse_time(metadata.get("updated_at")) if keep_timestamps else None
        ) or entity.created_at
    entity.name = identity["name"]
    entity.display_name = identity["display_name"]
    entity.description = identity["description"]
    entity.persona = identity["persona"]
    entity.icon = identity["icon"] or ""
    entity.color = identity["color"] or ""
    entity.logic_gate = d["logic_gate"]
    planning = copy.deepcopy(d["planning"])
    planning["static_plan"].pop("steps", None)
    entity.planning = planning
    capabilities = copy.deepcopy(d["capabilities"])
    capabilities["tools"] = [{"tool_id": tool["tool_id"]} for tool in capabilities["tools"]]
    entity.capabilities = capabilities
    entity.governance = d["governance"]
    entity.io_contract = d["io_contract"]
    entity.observability = d["observability"]
    entity.metadata_extensions = d["metadata_extensions"]


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def _user_or_none(user: Any) -> Any:
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def _refresh_derived(
    workspace: Workspace, catalog: Catalog, key_to_entity: dict[str, Entity]
) -> None:
    """Recompute is_atomic and composition_depth for the whole workspace."""
    real = {key: entity_key(entity.pk) for key, entity in key_to_entity.items()}
    depths = {real.get(k, k): v for k, v in catalog.depths().items()}
    atomic = {real.get(k, k): not node.children for k, node in catalog.nodes.items()}
    rows = (
        Entity.objects.filter(workspace=workspace)
        .annotate(key=Cast("id", CharField()))
        .values_list("key", "is_atomic", "composition_depth")
    )
    for raw_key, is_atomic, depth in rows:
        key = raw_key.replace("-", "")
        want_depth, want_atomic = depths.get(key, 0), atomic.get(key, True)
        if depth != want_depth or is_atomic != want_atomic:
            Entity.objects.filter(pk=uuid.UUID(key)).update(
                composition_depth=want_depth, is_atomic=want_atomic
            )


def _record_version(
    entity: Entity,
    previous: dict | None,
    *,
    user: Any,
    tools: dict[str, Any],
    now: datetime,
) -> EntityVersion | None:
    definition = definition_of(entity, tools=tools)
    if previous is None:
        return EntityVersion.objects.create(
            entity=entity,
            version=entity.version,
            change=EntityVersion.Change.INITIAL,
            summary="created",
            definition=definition,
            created_by=_user_or_none(user),
        )
    bump = classify(previous, definition)
    if bump.kind == "NONE":
        return None
    entity.version = bump_version(entity.version, bump.kind)
    entity.updated_at = now
    entity.save(update_fields=["version", "updated_at"])
    definition["metadata"]["version"] = entity.version
    definition["metadata"]["updated_at"] = definition_of(entity, tools=tools)["metadata"][
        "updated_at"
    ]
    return EntityVersion.objects.create(
        entity=entity,
        version=entity.version,
        change=bump.kind,
        summary=bump.summary,
        definition=definition,
        created_by=_user_or_none(user),
    )


def entity_set_status(
    *, entity: Entity, status: str, user: Any = None, reason: str = ""
) -> EntityStatusChange:
    """Move an entity to another status; the transition is checked and audited."""
    with transaction.atomic():
        entity = Entity.objects.select_for_update().get(pk=entity.pk)
        if status not in EntityStatus.values:
            raise DefinitionInvalid([Problem("metadata.status", f"{status!r} is not a status")])
        if status == entity.status:
            raise DefinitionInvalid([Problem("metadata.status", f"the entity is already {status}")])
        if status not in STATUS_TRANSITIONS[entity.status]:
            allowed = ", ".join(sorted(STATUS_TRANSITIONS[entity.status]))
            raise DefinitionInvalid(
                [
                    Problem(
                        "metadata.status",
                        f"cannot go from {entity.status} to {status}; from {entity.status} an "
                        f"entity can go to {allowed}",
                    )
                ]
            )
        change = EntityStatusChange.objects.create(
            entity=entity,
            from_status=entity.status,
            to_status=status,
            changed_by=_user_or_none(user),
            reason=reason[:200],
        )
        audit_record(
            workspace=entity.workspace_id,
            action=AuditAction.ENTITY_STATUS_CHANGED,
            actor=user,
            target=entity,
            object_label=entity.name,
            before={"status": entity.status},
            after={"status": status, "reason": change.reason},
        )
        entity.status = status
        entity.updated_at = timezone.now()
        entity.save(update_fields=["status", "updated_at"])
        return change


def entity_rollback(*, version: EntityVersion, user: Any = None) -> SaveResult:
    """Restore a snapshot as a new version. Tools are restored by reference: the registry's
    current definition of each tool is kept, so a rollback never changes another entity."""
    # The entity as it is now: the version's cached entity may be stale, and its status is
    # kept (a rollback restores a definition, not a lifecycle state).
    entity = Entity.objects.get(pk=version.entity_id)
    definition = copy.deepcopy(version.definition)
    definition["metadata"]["status"] = entity.status
    definition["metadata"]["type"] = entity.type
    definition["capabilities"]["tools"] = [
        {"tool_id": tool["tool_id"]} for tool in definition["capabilities"].get("tools", [])
    ]
    return entities_save(
        workspace=entity.workspace,
        definitions=[definition],
        targets=[entity],
        labels=[""],
        user=user,
        audit_action=AuditAction.ENTITY_ROLLED_BACK,
        audit_details={"restored_from": version.version},
    )[0]


# Templates (`metadata_extensions.ui_hints.is_template`): a designer starts a new entity from
# a copy of one. The copy is a new entity in every way: a DRAFT, its own name, a first
# version, no template itself, created and audited as any creation is (with what it was
# cloned from). Its children are the template's own (linked), or copies of them too.

CLONE_LINK, CLONE_COPY = "LINK", "COPY"
CLONE_CHILDREN = {
    CLONE_LINK: "Link the same children: the copy and the template share them",
    CLONE_COPY: "Copy the children too, each named <new name>.<child's name>",
}


def is_template(entity: Entity) -> bool:
    hints = (entity.metadata_extensions or {}).get("ui_hints") or {}
    return hints.get("is_template") is True


def clone_child_name(name: str, child: Entity) -> str:
    """The name of a child's copy under a copy named `name`."""
    return f"{name}.{child.name}"


def entity_clone(
    *, template: Entity, name: str, children: str = CLONE_LINK, user: Any = None
) -> SaveResult:
    """Create a new DRAFT entity named `name` from a copy of `template`'s definition, with
    children linked (LINK) or copied too (COPY: each direct child copied as a DRAFT named
    `clone_child_name`, its own children linked). Refused with `DefinitionInvalid` when the
    entity is not a template (path `is_template`), when a name is wrong or taken (`name`, or
    `children` for a child's copy), or when the template's definition no longer validates
    (`template.<path>`); nothing is written then."""
    if children not in CLONE_CHILDREN:
        raise DefinitionInvalid(
            [Problem("children", f"{children!r} is not a choice; use {', '.join(CLONE_CHILDREN)}")]
        )
    with transaction.atomic():
        workspace = _design_lock(template)
        template = _current(template)
        if not is_template(template):
            raise DefinitionInvalid(
                [
                    Problem(
                        "is_template",
                        f"{template.name} is not a template: mark it one "
                        "(metadata_extensions.ui_hints.is_template) to start entities from it",
                    )
                ]
            )
        tools = tools_of(workspace)
        copied = []
        if children == CLONE_COPY:
            seen = {}
            for link in sorted(template.child_links.all(), key=lambda link: (link.order, link.pk)):
                seen.setdefault(link.child_id, link.child)
            copied = list(seen.values())
        renamed = {child.ref: clone_child_name(name, child) for child in copied}
        definition = _copy_definition(definition_of(template, tools=tools), name, renamed)
        definitions, sources = [definition], [template]
        for child in copied:
            original = with_relations(Entity.objects.filter(pk=child.pk)).get()
            child_definition = _copy_definition(
                definition_of(original, tools=tools), renamed[child.ref], {}
            )
            child_definition["hierarchy"]["parent_id"] = name
            definitions.append(child_definition)
            sources.append(original)
        try:
            return entities_save(
                workspace=workspace,
                definitions=definitions,
                targets=[None] * len(definitions),
                labels=["", *(renamed[child.ref] for child in copied)],
                user=user,
                audit_details=[
                    {
                        "cloned_from": {
                            "id": str(source.pk),
                            "name": source.name,
                            "version": source.version,
                        }
                    }
                    for source in sources
                ],
            )[0]
        except DefinitionInvalid as invalid:
            raise DefinitionInvalid(_clone_problems(invalid.problems)) from None


def _copy_definition(definition: dict, name: str, renamed: dict[str, str]) -> dict:
    """`definition` as a new entity's: named `name`, a DRAFT with no id, version or history,
    not a template, a root (the template's home parent is not the copy's), tools by
    reference (the registry's stay as they are), children named as `renamed` says."""
    definition = copy.deepcopy(definition)
    metadata = definition["metadata"]
    for key in ("id", "version", "created_at", "updated_at", "created_by"):
        metadata.pop(key, None)
    metadata["status"] = EntityStatus.DRAFT
    definition["identity"]["name"] = name
    hierarchy = definition["hierarchy"]
    hierarchy["parent_id"] = None
    for link in hierarchy["children"]:
        link["child_id"] = renamed.get(link["child_id"], link["child_id"])
    for step in definition["planning"]["static_plan"]["steps"]:
        target = step["target"]
        if target.get("entity_id") in renamed:
            target["entity_id"] = renamed[target["entity_id"]]
    definition["capabilities"]["tools"] = [
        {"tool_id": tool["tool_id"]} for tool in definition["capabilities"]["tools"]
    ]
    definition["metadata_extensions"].setdefault("ui_hints", {})["is_template"] = False
    return definition


def _clone_problems(problems: list[Problem]) -> list[Problem]:
    """The save's problems as the clone's request names them: the copy's name (`name`), a
    child's copy's name (`children`), or what the template's definitions hold
    (`template.<path>`, `template.children` for a child's). The names come first: a name
    taken by another entity makes the copy's references resolve to it, and what follows from
    that says nothing about the template."""
    named = [p for p in problems if p.path == "identity.name"]
    found = []
    for problem in named or problems:
        if problem.path == "identity.name":
            if problem.entity:
                found.append(Problem("children", f"{problem.entity}: {problem.message}"))
            else:
                found.append(Problem("name", problem.message))
        elif problem.entity:
            found.append(
                Problem("template.children", f"{problem.entity}: {problem.path}: {problem.message}")
            )
        else:
            found.append(Problem(f"template.{problem.path}".rstrip("."), problem.message))
    return found


def entity_delete_problems(entities: list[Entity]) -> list[Problem]:
    """Why the entities cannot be deleted together: another entity still uses one of them."""
    doomed = {entity.pk for entity in entities}
    problems: list[Problem] = []
    links = ChildLink.objects.filter(child__in=doomed).exclude(parent__in=doomed)
    for link in links.select_related("parent", "child").order_by("child__name", "parent__name"):
        problems.append(
            Problem(
                "",
                f"{link.child.name} is a child of {link.parent.name}; remove it from "
                f"{link.parent.name}'s children first",
                link.child.name,
            )
        )
    for entity in entities:
        count = entity.runs.count() if hasattr(entity, "runs") else 0
        if count:
            problems.append(
                Problem(
                    "",
                    f"{entity.name} has {count} run{'s' if count != 1 else ''}; archive it "
                    "instead (status ARCHIVED), which keeps its runs and their versions",
                    entity.name,
                )
            )
    steps = PlanStep.objects.filter(target_entity__in=doomed).exclude(entity__in=doomed)
    for step in steps.select_related("entity", "target_entity"):
        problems.append(
            Problem(
                "",
                f"{step.target_entity.name} is the target of plan step {step.name!r} of "
                f"{step.entity.name}",
                step.target_entity.name,
            )
        )
    return problems


def entities_delete(*, workspace: Workspace, entities: list[Entity], user: Any = None) -> int:
    """Delete entities that no other entity uses, with their links, steps, versions and status
    history; their children become roots where nothing else holds them. Archiving
    (status ARCHIVED) is the way to retire an entity and keep its history."""
    with transaction.atomic():
        Workspace.objects.select_for_update().get(pk=workspace.pk)
        entities = list(Entity.objects.filter(pk__in=[e.pk for e in entities], workspace=workspace))
        problems = entity_delete_problems(entities)
        if problems:
            raise DefinitionInvalid(problems)
        doomed = [entity.pk for entity in entities]
        for entity in entities:
            audit_record(
                workspace=workspace,
                action=AuditAction.ENTITY_DELETED,
                actor=user,
                target=entity,
                object_label=entity.name,
                before={"type": entity.type, "status": entity.status, "version": entity.version},
            )
        ChildLink.objects.filter(parent__in=doomed).delete()
        PlanStep.objects.filter(entity__in=doomed).delete()
        count, _ = Entity.objects.filter(pk__in=doomed).delete()
        _refresh_derived(workspace, Catalog.load(workspace), {})
        return len(doomed) if count else 0


def workspace_create(*, name: str, slug: str) -> Workspace:
    return Workspace.objects.create(name=name, slug=slug)


# The designer's tree edits the hierarchy one link at a time. Each edit rewrites the parent's
# definition (its `hierarchy.children`, and its static plan when one is on) and saves it
# through `entities_save`, so validation, versions and the audit chain apply exactly as to
# a save from the admin, the API or an import.


def entity_link_child(*, parent: Entity, child: Entity, user: Any = None) -> SaveResult:
    """Make an existing entity the last child of `parent` (a CHILD_ENTITY_INVOCATION step is
    appended when the parent's static plan is on)."""
    with transaction.atomic():
        workspace = _design_lock(parent)
        current = _current(parent)
        child = Entity.objects.get(pk=child.pk, workspace=workspace)
        if current.child_links.filter(child=child).exists():
            raise DefinitionInvalid(
                [
                    Problem(
                        "hierarchy.children",
                        f"\u201c{child.name}\u201d is already a child of "
                        f"\u201c{current.name}\u201d",
                    )
                ]
            )
        definition = definition_of(current)
        _append_child(definition, ref=child.ref, child_type=child.type, label=_label(child))
        return entities_save(
            workspace=workspace,
            definitions=[definition],
            targets=[current],
            labels=[""],
            user=user,
        )[0]


def entity_create_child(
    *,
    parent: Entity,
    type: str,  # noqa: A002 - the exchange format's word
    name: str,
    description: str = "",
    user: Any = None,
) -> SaveResult:
    """Create a minimal DRAFT entity and make it the last child of `parent`, in one save:
    both are written, or neither. Returns the new child's result."""
    with transaction.atomic():
        workspace = _design_lock(parent)
        current = _current(parent)
        description = description.strip() or f"A {type.lower()} of {current.name}."
        child_definition: dict[str, Any] = {
            "metadata": {"type": type, "status": EntityStatus.DRAFT, "tags": []},
            "identity": {"name": name, "description": description},
            "hierarchy": {"parent_id": current.ref, "children": []},
        }
        if type in ("AGENT", "PROCESS"):
            # Required of these types; a starting point the editor invites them to rewrite.
            child_definition["identity"]["persona"] = {
                "system_prompt": f"You are {name}. {description}"
            }
        definition = definition_of(current)
        _append_child(definition, ref=name, child_type=type, label=name)
        results = entities_save(
            workspace=workspace,
            definitions=[child_definition, definition],
            targets=[None, current],
            labels=["", ""],
            user=user,
        )
        return results[0]


def entity_unlink_child(*, parent: Entity, child: Entity, user: Any = None) -> SaveResult:
    """Remove `child` from `parent`'s children, with the plan steps that invoke it (a static
    plan left with no steps is turned off: there is nothing left for it to order). The child
    itself stays; it becomes a root when nothing else holds it."""
    with transaction.atomic():
        workspace = _design_lock(parent)
        current = _current(parent)
        child = Entity.objects.get(pk=child.pk, workspace=workspace)
        definition = definition_of(current)
        hierarchy = definition["hierarchy"]
        kept = [link for link in hierarchy["children"] if link["child_id"] != child.ref]
        if len(kept) == len(hierarchy["children"]):
            raise DefinitionInvalid(
                [
                    Problem(
                        "hierarchy.children",
                        f"\u201c{child.name}\u201d is not a child of \u201c{current.name}\u201d "
                        "(any more): reload the page",
                    )
                ]
            )
        hierarchy["children"] = kept
        static_plan = definition["planning"]["static_plan"]
        static_plan["steps"] = [
            step for step in static_plan["steps"] if step["target"]["entity_id"] != child.ref
        ]
        if not static_plan["steps"]:
            static_plan["enabled"] = False
        definitions, targets = [definition], [current]
        if child.parent_id == current.pk:
            # Its home parent no longer holds it.
            home = definition_of(with_relations(Entity.objects.filter(pk=child.pk)).get())
            home["hierarchy"]["parent_id"] = None
            definitions.append(home)
            targets.append(child)
        return entities_save(
            workspace=workspace,
            definitions=definitions,
            targets=targets,
            labels=[""] * len(definitions),
            user=user,
        )[0]


def entity_reorder_children(*, parent: Entity, order: list[Any], user: Any = None) -> SaveResult:
    """Put `parent`'s first children in a new order: `order` holds the ids of the first
    len(order) children (all of them, or the ones a page showed) in the order wanted; the
    rest keep their places. Under a static plan the steps that invoke children trade places
    the same way, keeping the slots between other steps, and an exit condition still jumps
    to the step it named. A list that does not match the children (a stale page) is refused."""
    with transaction.atomic():
        workspace = _design_lock(parent)
        current = _current(parent)
        definition = definition_of(current)
        links = definition["hierarchy"]["children"]
        links_by_id = {str(link.child.pk): link.child.ref for link in current.child_links.all()}
        wanted = [links_by_id.get(str(pk)) for pk in order]
        head = [link["child_id"] for link in links[: len(order)]]
        if None in wanted or sorted(wanted) != sorted(head):
            raise DefinitionInvalid(
                [
                    Problem(
                        "hierarchy.children",
                        f"the children of \u201c{current.name}\u201d changed since the page was "
                        "loaded: reload it and move them again",
                    )
                ]
            )
        pool: dict[str, list[dict]] = {}
        for link in links[: len(order)]:
            pool.setdefault(link["child_id"], []).append(link)
        reordered = [pool[ref].pop(0) for ref in wanted]
        definition["hierarchy"]["children"] = reordered + links[len(order) :]
        _reorder_steps(definition)
        return entities_save(
            workspace=workspace,
            definitions=[definition],
            targets=[current],
            labels=[""],
            user=user,
        )[0]


def _design_lock(parent: Entity) -> Workspace:
    """The parent's workspace, locked for design-time writes (as `entities_save` does), so
    the definition read next is the one the save replaces."""
    return Workspace.objects.select_for_update().get(pk=parent.workspace_id)


def _current(parent: Entity) -> Entity:
    """The parent as stored now, with what its definition reads (the caller's copy may be
    from a page loaded minutes ago)."""
    return with_relations(Entity.objects.filter(pk=parent.pk)).get()


def _label(entity: Entity) -> str:
    return entity.display_name or entity.name


def _append_child(definition: dict, *, ref: str, child_type: str, label: str) -> None:
    """The new child's link, and its step when the static plan is on."""
    definition["hierarchy"]["children"].append({"child_id": ref, "child_type": child_type})
    static_plan = definition["planning"]["static_plan"]
    if not static_plan.get("enabled"):
        return
    steps = static_plan["steps"]
    order = max((step["order"] for step in steps), default=0) + 1
    taken = {step["step_id"] for step in steps}
    step_id = f"step-{order}"
    while step_id in taken:
        step_id += "-b"
    steps.append(
        {
            "step_id": step_id,
            "order": order,
            "name": f"Invoke {label}",
            "type": "CHILD_ENTITY_INVOCATION",
            "target": {"entity_id": ref},
        }
    )


def _reorder_steps(definition: dict) -> None:
    """The child steps of the static plan follow the children's new order, in the orders
    (slots) they held; exit conditions that name a moved step's order follow it."""
    rank = {}
    for index, link in enumerate(definition["hierarchy"]["children"]):
        rank.setdefault(link["child_id"], index)
    steps = definition["planning"]["static_plan"]["steps"]
    moving = [step for step in steps if step["target"]["entity_id"] in rank]
    slots = sorted(step["order"] for step in moving)
    moved = sorted(moving, key=lambda step: (rank[step["target"]["entity_id"]], step["order"]))
    renumbered = {step["order"]: slot for step, slot in zip(moved, slots, strict=True)}
    for step in steps:
        for exit_condition in step.get("exit_conditions", []):
            target = exit_condition.get("next_step")
            if isinstance(target, int) and not isinstance(target, bool):
                exit_condition["next_step"] = renumbered.get(target, target)
    for step in moving:
        step["order"] = renumbered[step["order"]]
    steps.sort(key=lambda step: step["order"])
