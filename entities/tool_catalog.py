"""What entities ask of the tool registry: the port a definition reaches its workspace's tools by.

Tools sits above entities (a tool's access rules read workspaces and their roles), so entities
never imports it: the tools app hands its implementation over when it is ready
(`tools/apps.py`, `tools/catalog.py`). Tools owns its rows: reading the registry, and writing
the tools a definition or an import carries in full.
"""

from __future__ import annotations

from typing import Any, Protocol


class ToolCatalog(Protocol):
    def tools_of(self, workspace: Any) -> dict[str, Any]:
        """The workspace's tools by tool_id, each able to write itself out (`as_definition()`)."""
        ...

    def tool_ids(self, workspace: Any) -> set[str]:
        """The tool_ids of the workspace's registry."""
        ...

    def tool_upsert(self, *, workspace: Any, definition: Any) -> Any:
        """Create or update a tool of the workspace's registry from its definition."""
        ...


_installed: ToolCatalog | None = None


def tool_catalog_install(catalog: ToolCatalog) -> None:
    """The tools app's implementation (called once, from its AppConfig.ready)."""
    global _installed
    _installed = catalog


def tool_catalog() -> ToolCatalog:
    if _installed is None:
        raise RuntimeError("no tool catalog: the tools app is not in INSTALLED_APPS")
    return _installed
