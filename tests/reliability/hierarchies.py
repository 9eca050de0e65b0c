"""Small hierarchies for the reliability tests, built through the factories: slow model steps
(THOUGHT, slow with HIERARCH_OFFLINE_LATENCY_MS) and exactly-once side effects (the `record`
tool, whose rows are keyed by the call's idempotency key)."""

from __future__ import annotations

from entities.models import Entity, Workspace
from tests.factories import EntityFactory, tool_definition


def record_tool(table: str | None = None) -> dict:
    """The built-in `record` tool: appends a row once per idempotency key (with `table`,
    always to that table: what a model filling the arguments must name)."""
    return tool_definition(
        "save_row",
        implementation="record",
        permissions="WRITE",
        function_schema={
            "name": "save_row",
            "description": "Save the row",
            "parameters": {
                "type": "object",
                "properties": {
                    "table": {"type": "string"} if table is None else {"const": table},
                    "data": {"type": "object"},
                },
                "required": ["table", "data"],
            },
        },
    )


def thought(order: int, name: str) -> dict:
    """A THOUGHT step: one call of the offline model (slow with HIERARCH_OFFLINE_LATENCY_MS)."""
    return {
        "step_id": f"s{order}",
        "order": order,
        "name": name,
        "type": "THOUGHT",
        "target": {},
        "description": f"{name}: answer briefly.",
    }


def record(order: int, table: str) -> dict:
    """A TOOL_CALL step that records the run input in `table`, arguments mapped, no model."""
    return {
        "step_id": f"s{order}",
        "order": order,
        "name": f"Record {table}",
        "type": "TOOL_CALL",
        "target": {"tool_id": "save_row"},
        "input_mapping": {"table": table, "data": {"var": "input"}},
    }


def action(workspace: Workspace, name: str, *steps: dict) -> Entity:
    """An ACTION with a static plan of `steps` and the record tool."""
    return EntityFactory(
        workspace=workspace,
        name=name,
        tools=[record_tool()],
        planning={"static_plan": {"enabled": True, "steps": list(steps)}},
    )


def parent(workspace: Workspace, name: str, *children: str, relationship: str) -> Entity:
    return EntityFactory(
        workspace=workspace,
        name=name,
        type="SKILL",
        children=[{"child_id": child, "relationship": relationship} for child in children],
    )
