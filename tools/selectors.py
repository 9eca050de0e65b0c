"""Reads of the tool registry, scoped to what the user may see."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db.models import Q, QuerySet

from entities.definition import normalize_tool
from governance.permissions import VIEW, scope, visible_or_404
from tools.builtin import BUILTINS
from tools.models import Tool


def tool_list(*, user: Any, perm: str = VIEW) -> QuerySet[Tool]:
    return scope(Tool.objects.select_related("workspace"), user, perm)


def tool_get(*, user: Any, pk: Any, perm: str = VIEW) -> Tool:
    """The tool, or a 404 when it does not exist or belongs to another workspace."""
    return visible_or_404(tool_list(user=user, perm=perm), "tool", pk)


@dataclass(frozen=True)
class UsableTool:
    """A tool an entity of the workspace can pick: the registry's, or a built-in the registry
    does not have (every built-in is usable by its name in every workspace)."""

    definition: dict[str, Any]
    in_registry: bool

    @property
    def tool_id(self) -> str:
        return str(self.definition["tool_id"])

    @property
    def builtin(self) -> bool:
        return self.tool_id in BUILTINS


@cache
def _builtin_definitions() -> dict[str, dict]:
    found = {}
    for name, builtin in BUILTINS.items():
        definition, problems = normalize_tool(builtin.definition)
        if problems:  # a built-in's own definition is checked by its tests
            raise ValueError(f"the built-in tool {name} is not a valid tool: {problems}")
        found[name] = definition
    return found


def builtin_tool(name: str) -> Tool:
    """The built-in tool `name` as a registry tool would stand for it (not saved)."""
    definition = _builtin_definitions()[name]
    return Tool(
        **{key: value for key, value in definition.items() if key != "tool_id"}, tool_id=name
    )


def usable_tools(
    *,
    workspace: Any,
    search: str = "",
    tool_ids: Collection[str] | None = None,
    limit: int | None = None,
) -> list[UsableTool]:
    """The workspace's tools then the built-ins it does not override, by tool_id, matching
    `search` (in the id, name or description) and limited to `tool_ids` when given. The caller
    has checked the user may see the workspace."""
    rows = Tool.objects.filter(workspace=workspace).order_by("tool_id")
    if search:
        rows = rows.filter(
            Q(tool_id__icontains=search)
            | Q(name__icontains=search)
            | Q(description__icontains=search)
        )
    if tool_ids is not None:
        rows = rows.filter(tool_id__in=list(tool_ids))
    found = [UsableTool(tool.as_definition(), True) for tool in rows[:limit]]
    if limit is not None and len(found) >= limit:
        return found
    # The built-ins overridden by a registry tool of the same id are that tool.
    overridden = set(
        Tool.objects.filter(workspace=workspace, tool_id__in=list(BUILTINS)).values_list(
            "tool_id", flat=True
        )
    )
    needle = search.lower()
    for name in sorted(set(BUILTINS) - overridden):
        definition = BUILTINS[name].definition
        text = " ".join((name, definition.get("name", ""), definition.get("description", "")))
        if (tool_ids is None or name in tool_ids) and needle in text.lower():
            found.append(UsableTool(builtin_tool(name).as_definition(), False))
    return found[:limit]


def usable_tool_count(*, workspace: Any) -> int:
    """How many tools the workspace's entities can pick from: its registry's and the
    built-ins it does not override."""
    rows = Tool.objects.filter(workspace=workspace)
    overridden = set(rows.filter(tool_id__in=list(BUILTINS)).values_list("tool_id", flat=True))
    return rows.count() + len(set(BUILTINS) - overridden)


# -- for entities' definitions (entities/tool_catalog.py): not scoped, the workspace is given ---


def tools_by_id(*, workspace: Any) -> dict[str, Tool]:
    """The workspace's tools by tool_id."""
    return {tool.tool_id: tool for tool in Tool.objects.filter(workspace=workspace)}


def tool_ids_of(*, workspace: Any) -> set[str]:
    """The tool_ids of the workspace's registry."""
    return set(Tool.objects.filter(workspace=workspace).values_list("tool_id", flat=True))


def tool_ids_usable(*, workspace: Any) -> list[str]:
    """Every tool id a run of the workspace can name: its registry's and the built-in tools'
    (each built-in is usable by its name in every workspace), sorted."""
    return sorted(tool_ids_of(workspace=workspace) | set(BUILTINS))
