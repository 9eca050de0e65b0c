"""Reads of the tool registry, scoped to what the user may see."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from governance.permissions import VIEW, scope, visible_or_404
from tools.builtin import BUILTINS
from tools.models import Tool


def tool_list(*, user: Any, perm: str = VIEW) -> QuerySet[Tool]:
    return scope(Tool.objects.select_related("workspace"), user, perm)


def tool_get(*, user: Any, pk: Any, perm: str = VIEW) -> Tool:
    """The tool, or a 404 when it does not exist or belongs to another workspace."""
    return visible_or_404(tool_list(user=user, perm=perm), "tool", pk)


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
