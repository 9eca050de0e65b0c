"""simulated: a stand-in for a tool with no real adapter yet (the demo's renderer, uploader…).

It returns a value valid against the tool's `output_schema`, synthesised deterministically from
the tool id and the arguments: the same call always answers the same, so runs, replays and
tests are reproducible, and a process can be designed and run end to end before its tools
exist. It has no effect anywhere, so its sandbox is the same call.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema.exceptions import SchemaError

from runs.engine.ports import VALIDATION_ERROR, ToolError
from runs.engine.synthesis import synthesize
from tools.builtin.base import ToolContext, validator_for

NAME = "simulated"

DEFINITION: dict[str, Any] = {
    "tool_id": NAME,
    "name": "Simulated tool",
    "description": (
        "Answers with a realistic, deterministic value shaped by the tool's output_schema; "
        "for tools whose real adapter does not exist yet."
    ),
    "provider": "internal",
    "function_schema": {
        "name": NAME,
        "description": "Return a simulated result for the given arguments.",
        "parameters": {"type": "object", "properties": {}},
    },
    "permissions": "READ",
    "sandbox_mode": False,
    "implementation": NAME,
    "output_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
    },
}


def run(arguments: dict[str, Any], context: ToolContext) -> Any:
    schema = context.tool.get("output_schema")
    if not isinstance(schema, dict):
        raise ToolError(
            f"tool {context.tool_id} is simulated but has no output_schema; give it the JSON "
            "Schema of the result it should return",
            permanent=True,
            code=VALIDATION_ERROR,
        )
    seed = f"{context.tool_id}:{json.dumps(arguments, sort_keys=True, default=str)}"
    value = synthesize(schema, seed=seed)
    try:
        error = next(validator_for(schema).iter_errors(value), None)
    except SchemaError as exc:
        raise ToolError(
            f"tool {context.tool_id}: output_schema is not a valid JSON Schema: {exc.message}",
            permanent=True,
            code=VALIDATION_ERROR,
        ) from None
    if error is not None:
        # The synthesiser honours the keywords people write; `not` or an intricate pattern
        # may defeat it, and a simulated tool must never hand on a value its schema refuses.
        where = "/".join(map(str, error.absolute_path)) or "the result"
        raise ToolError(
            f"tool {context.tool_id}: cannot simulate a value for output_schema "
            f"({where}: {error.message})",
            permanent=True,
        )
    return value


def sandbox(arguments: dict[str, Any], context: ToolContext) -> Any:
    return run(arguments, context)
