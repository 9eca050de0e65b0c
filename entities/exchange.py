"""The exchange format: entities to the seed's JSON and import files to definitions."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Prefetch

from config.json_input import JSONInputRefused, json_input_loads
from entities.definition import Problem
from entities.models import ChildLink, Entity, PlanStep
from entities.tool_catalog import tool_catalog


class ImportFileError(Exception):
    """The file itself cannot be read as definitions (size, encoding, JSON, shape)."""


def isoformat(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def with_relations(queryset: Any) -> Any:
    """Everything `definition_of` reads, fetched in a fixed number of queries."""
    return queryset.select_related("parent", "created_by", "workspace").prefetch_related(
        Prefetch("child_links", queryset=ChildLink.objects.select_related("child")),
        Prefetch("plan_steps", queryset=PlanStep.objects.select_related("target_entity")),
    )


def tools_of(workspace: Any) -> dict[str, Any]:
    """The workspace's tools by tool_id, from the registry (through the tools app's catalog)."""
    return tool_catalog().tools_of(workspace)


def definition_of(entity: Entity, *, tools: dict[str, Any] | None = None) -> dict:
    """The entity in the seed's JSON format; tools are written out in full from the registry."""
    tools = tools_of(entity.workspace) if tools is None else tools
    return {
        "metadata": {
            "id": entity.ref,
            "version": entity.version,
            "type": entity.type,
            "created_at": isoformat(entity.created_at),
            "updated_at": isoformat(entity.updated_at),
            "created_by": entity.created_by.get_username() if entity.created_by else None,
            "tags": list(entity.tags),
            "status": entity.status,
        },
        "identity": {
            "name": entity.name,
            "display_name": entity.display_name,
            "description": entity.description,
            "persona": copy.deepcopy(entity.persona),
            "icon": entity.icon or None,
            "color": entity.color or None,
        },
        "hierarchy": _hierarchy_of(entity),
        "logic_gate": copy.deepcopy(entity.logic_gate),
        "planning": _planning_of(entity),
        "capabilities": _capabilities_of(entity, tools),
        "governance": copy.deepcopy(entity.governance),
        "io_contract": copy.deepcopy(entity.io_contract),
        "observability": copy.deepcopy(entity.observability),
        "metadata_extensions": copy.deepcopy(entity.metadata_extensions),
    }


def _hierarchy_of(entity: Entity) -> dict:
    links = sorted(entity.child_links.all(), key=lambda link: (link.order, link.pk))
    return {
        "parent_id": entity.parent.ref if entity.parent else None,
        "children": [_link_of(link) for link in links],
        "is_atomic": entity.is_atomic,
        "composition_depth": entity.composition_depth,
    }


def _link_of(link: ChildLink) -> dict:
    """A child link; `version` only when the link names one (null, its default, is left
    out, so the snapshots of links that never had one stay as they were)."""
    data = {
        "child_id": link.child.ref,
        "child_type": link.child.type,
        "relationship": link.relationship,
        "condition": copy.deepcopy(link.condition),
        "input_mapping": copy.deepcopy(link.input_mapping),
    }
    if link.version:
        data["version"] = link.version
    return data


def _planning_of(entity: Entity) -> dict:
    """The planning section, its static plan's steps from the entity's PlanStep rows."""
    planning = copy.deepcopy(entity.planning)
    static_plan = planning.setdefault("static_plan", {})
    static_plan["steps"] = [
        {
            "step_id": step.step_id,
            "order": step.order,
            "name": step.name,
            "description": step.description,
            "type": step.type,
            "target": {
                "entity_id": step.target_entity.ref if step.target_entity else None,
                "tool_id": step.target_tool_id or None,
                "prompt_template": step.prompt_template or None,
                # A DELEGATE step's hire; absent for every other step.
                **({"hire": copy.deepcopy(step.hire)} if step.hire else {}),
            },
            "required": step.required,
            "exit_conditions": step.exit_conditions,
            "input_mapping": step.input_mapping,
        }
        for step in sorted(entity.plan_steps.all(), key=lambda s: (s.order, s.pk))
    ]
    static_plan = {
        "enabled": static_plan.get("enabled", False),
        "steps": static_plan["steps"],
        "fallback_behavior": static_plan.get("fallback_behavior", "STRICT"),
    }
    planning = {
        "static_plan": static_plan,
        **{k: v for k, v in planning.items() if k != "static_plan"},
    }
    return planning


def _capabilities_of(entity: Entity, tools: dict[str, Any]) -> dict:
    """The capabilities section, each tool written out in full when the registry has it."""
    capabilities = copy.deepcopy(entity.capabilities)
    capabilities["tools"] = [
        tools[ref["tool_id"]].as_definition() if ref["tool_id"] in tools else dict(ref)
        for ref in capabilities.get("tools", [])
    ]
    return capabilities


def export_workspace(workspace: Any, *, root: Entity | None = None) -> dict:
    """`{"entities": [...]}` for the workspace, or for one root and everything below it."""
    queryset = Entity.objects.filter(workspace=workspace)
    if root is not None:
        keep = descendants_of(root) | {root.pk}
        queryset = queryset.filter(pk__in=keep)
    entities = list(with_relations(queryset).order_by("composition_depth", "name"))
    tools = tools_of(workspace)
    definitions = [definition_of(entity, tools=tools) for entity in entities]
    if root is not None:
        # The subtree stands on its own: a home parent outside it is not exported with it.
        exported = {entity.ref for entity in entities}
        for definition in definitions:
            if definition["hierarchy"]["parent_id"] not in exported:
                definition["hierarchy"]["parent_id"] = None
    return {"entities": definitions}


def descendants_of(root: Entity) -> set[Any]:
    links: dict[Any, list[Any]] = {}
    rows = ChildLink.objects.filter(parent__workspace_id=root.workspace_id)
    for parent_id, child_id in rows.values_list("parent_id", "child_id"):
        links.setdefault(parent_id, []).append(child_id)
    found: set[Any] = set()
    frontier = [root.pk]
    while frontier:
        for child in links.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def definitions_from_document(document: Any) -> list[Any]:
    """A file holds one entity, a list of entities, or `{"entities": [...]}`."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if "entities" in document and set(document) <= {"entities", "tools", "version"}:
            entities = document["entities"]
            if not isinstance(entities, list):
                raise ImportFileError('"entities" must be a list of entity definitions')
            return entities
        return [document]
    raise ImportFileError(
        "the file must hold an entity definition (an object), a list of them, or "
        '{"entities": [...]}'
    )


def size_text(count: int) -> str:
    """`5 MB` for whole megabytes, else the exact byte count: rounding to megabytes made a
    file just over the limit read as within it, and a small limit read as `0 MB`."""
    megabytes, rest = divmod(count, 1024 * 1024)
    return f"{megabytes} MB" if megabytes and not rest else f"{count:,} bytes"


def read_import_bytes(raw: bytes, *, name: str = "the file") -> list[Any]:
    limit = settings.HIERARCH_IMPORT_MAX_BYTES
    if len(raw) > limit:
        raise ImportFileError(
            f"{name} is {size_text(len(raw))}; imports are limited to {size_text(limit)}"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ImportFileError(f"{name} is not UTF-8 text") from None
    try:
        document = json_input_loads(text)
    except JSONInputRefused as refused:
        raise ImportFileError(f"{name} is not accepted: {refused}") from None
    except json.JSONDecodeError as exc:
        raise ImportFileError(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except ValueError as exc:  # NaN, or an integer of thousands of digits
        raise ImportFileError(f"{name} is not valid JSON: {exc}") from None
    definitions = definitions_from_document(document)
    if not definitions:
        raise ImportFileError(f"{name} holds no entity definitions")
    return definitions


def read_import_file(path: str | Path) -> list[Any]:
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ImportFileError(f"cannot read {path}: {exc.strerror}") from None
    limit = settings.HIERARCH_IMPORT_MAX_BYTES
    if size > limit:
        raise ImportFileError(
            f"{path} is {size_text(size)}; imports are limited to {size_text(limit)}"
        )
    return read_import_bytes(path.read_bytes(), name=str(path))


def labels_for(definitions: Iterable[Any]) -> list[str]:
    """How problems name each definition of a bundle: `entities[2] (name)`."""
    labels = []
    for index, definition in enumerate(definitions):
        name = None
        if isinstance(definition, dict) and isinstance(definition.get("identity"), dict):
            name = definition["identity"].get("name")
        labels.append(f"entities[{index}]" + (f" ({name})" if name else ""))
    return labels


def problem_lines(problems: Iterable[Problem]) -> list[str]:
    return [str(problem) for problem in problems]
