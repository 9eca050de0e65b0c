"""The tools app's side of entities/tool_catalog.py: what definitions ask of the registry,
answered by this app's services and selectors.

Every built-in tool is usable by its name in every workspace: a definition may refer to
`{"tool_id": "record"}` whether or not the workspace's registry holds a tool of that id. The
registry's tool wins when it does (a workspace may override a built-in); otherwise the
built-in's own definition is what the reference stands for, written out in full in the
entity's versions as a registry tool is.
"""

from __future__ import annotations

from typing import Any

from tools.builtin import BUILTINS
from tools.selectors import builtin_tool, tool_ids_of, tools_by_id
from tools.services import tool_upsert


class Catalog:
    """entities.tool_catalog.ToolCatalog, installed by ToolsConfig.ready."""

    def tools_of(self, workspace: Any) -> dict[str, Any]:
        tools = tools_by_id(workspace=workspace)
        for name in BUILTINS:
            if name not in tools:
                tools[name] = builtin_tool(name)
        return tools

    def tool_ids(self, workspace: Any) -> set[str]:
        return tool_ids_of(workspace=workspace) | set(BUILTINS)

    def tool_upsert(self, *, workspace: Any, definition: Any) -> Any:
        return tool_upsert(workspace=workspace, definition=definition)
