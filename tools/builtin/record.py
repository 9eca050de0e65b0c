"""record: appends a row of data to a named table of the workspace (`tools.RecordedRow`).

The row is keyed by the call's idempotency key, which is unique: a call replayed after a
crash, or two workers racing on the same step, find the row already written and return it
instead of writing a second one. That makes it the observable side effect of exactly-once
execution in the tests, and a simple sink for processes (an audit trail, a result table).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from runs.engine.ports import ToolError
from tools.builtin.base import Replayed, ToolContext, check_arguments
from tools.models import RecordedRow

NAME = "record"
MAX_KEY_LENGTH = 255  # RecordedRow.idempotency_key

DEFINITION: dict[str, Any] = {
    "tool_id": NAME,
    "name": "Record",
    "description": "Appends a row of data to a named table of the workspace, exactly once.",
    "provider": "internal",
    "function_schema": {
        "name": NAME,
        "description": "Append one row (a JSON object) to a table.",
        "parameters": {
            "type": "object",
            "properties": {
                "table": {
                    "type": "string",
                    "pattern": "^[A-Za-z][A-Za-z0-9_]{0,99}$",
                    "description": "Table name: a letter, then letters, digits or '_'.",
                },
                "data": {"type": "object", "description": "The row."},
            },
            "required": ["table", "data"],
            "additionalProperties": False,
        },
    },
    "permissions": "WRITE",
    "sandbox_mode": False,
    "implementation": NAME,
    "output_schema": {
        "type": "object",
        "properties": {
            "id": {
                "type": ["integer", "null"],
                "description": "The row's id; null when the call ran in the sandbox.",
            },
            "table": {"type": "string"},
            "data": {"type": "object"},
            "created_at": {"type": "string", "format": "date-time"},
        },
        "required": ["id", "table", "data", "created_at"],
        "additionalProperties": False,
    },
}

PARAMETERS = DEFINITION["function_schema"]["parameters"]


def run(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any] | Replayed:
    _check(arguments, context)
    # get_or_create inserts in a savepoint and, on the unique key's IntegrityError, reads the
    # winner's row: on PostgreSQL the loser's INSERT waits for the winner to commit first.
    row, created = RecordedRow.objects.get_or_create(
        idempotency_key=context.idempotency_key,
        defaults={
            "workspace_id": context.workspace_id,
            "run_id": context.run_id or "",
            "table": arguments["table"],
            "data": arguments["data"],
        },
    )
    if row.workspace_id != context.workspace_id:
        raise ToolError(
            f"tool {context.tool_id}: the idempotency key {context.idempotency_key!r} was "
            "already used in another workspace",
            permanent=True,
        )
    output = {
        "id": row.pk,
        "table": row.table,
        "data": row.data,
        "created_at": row.created_at.isoformat(),
    }
    return output if created else Replayed(output)


def sandbox(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    _check(arguments, context)
    return {
        "id": None,
        "table": arguments["table"],
        "data": arguments["data"],
        "created_at": timezone.now().isoformat(),
    }


def _check(arguments: dict[str, Any], context: ToolContext) -> None:
    check_arguments(PARAMETERS, arguments, tool_id=context.tool_id)
    if not context.idempotency_key:
        raise ToolError(
            f"tool {context.tool_id}: record needs an idempotency key, so that a replay does "
            "not write twice",
            permanent=True,
        )
    if len(context.idempotency_key) > MAX_KEY_LENGTH:
        raise ToolError(
            f"tool {context.tool_id}: the idempotency key is longer than {MAX_KEY_LENGTH} "
            "characters",
            permanent=True,
        )
