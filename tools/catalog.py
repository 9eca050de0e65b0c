"""The tools app's side of entities/tool_catalog.py: what definitions ask of the registry,
answered by this app's services and selectors."""

from __future__ import annotations

from typing import Any

from tools.selectors import tool_ids_of, tools_by_id
from tools.services import tool_upsert


class Catalog:
    """entities.tool_catalog.ToolCatalog, installed by ToolsConfig.ready."""

    def tools_of(self, workspace: Any) -> dict[str, Any]:
        return tools_by_id(workspace=workspace)

    def tool_ids(self, workspace: Any) -> set[str]:
        return tool_ids_of(workspace=workspace)

    def tool_upsert(self, *, workspace: Any, definition: Any) -> Any:
        return tool_upsert(workspace=workspace, definition=definition)
