"""json_extract: a JMESPath expression applied to a JSON value (https://jmespath.org).

Pure: its sandbox is the real thing. The result is whatever the expression selects, so a
multiselect hash (`{title: title, n: length(items)}`) lands in the run state key by key.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jmespath
from jmespath.exceptions import (
    IncompleteExpressionError,
    JMESPathError,
    ParseError,
    UnknownFunctionError,
)

from runs.engine.ports import VALIDATION_ERROR, ToolError
from tools.builtin.base import ToolContext, check_arguments

NAME = "json_extract"

DEFINITION: dict[str, Any] = {
    "tool_id": NAME,
    "name": "JSON extract",
    "description": "Selects and reshapes part of a JSON value with a JMESPath expression.",
    "provider": "internal",
    "function_schema": {
        "name": NAME,
        "description": "Apply a JMESPath expression to a JSON value and return what it selects.",
        "parameters": {
            "type": "object",
            "properties": {
                "data": {"description": "The JSON value to search."},
                "expression": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2000,
                    "description": "A JMESPath expression, e.g. `items[?price > `10`].name`.",
                },
            },
            "required": ["data", "expression"],
            "additionalProperties": False,
        },
    },
    "permissions": "READ",
    "sandbox_mode": False,
    "implementation": NAME,
    "output_schema": None,
}

PARAMETERS = DEFINITION["function_schema"]["parameters"]


def run(arguments: dict[str, Any], context: ToolContext) -> Any:
    check_arguments(PARAMETERS, arguments, tool_id=context.tool_id)
    expression = _compile(arguments["expression"])
    try:
        return expression.search(arguments["data"])
    except UnknownFunctionError as exc:
        raise ToolError(
            f"arguments.expression: {exc}; the functions are listed at "
            "https://jmespath.org/specification.html#built-in-functions",
            permanent=True,
            code=VALIDATION_ERROR,
        ) from None
    except JMESPathError as exc:
        # A type error at search time (e.g. `length(\`1\`)`) fails the same way every time.
        raise ToolError(
            f"tool {context.tool_id}: the expression cannot be applied to the data: {exc}",
            permanent=True,
        ) from None


def sandbox(arguments: dict[str, Any], context: ToolContext) -> Any:
    return run(arguments, context)


@lru_cache(maxsize=256)
def _compile(expression: str) -> Any:
    try:
        return jmespath.compile(expression)
    except JMESPathError as exc:
        raise ToolError(
            f"arguments.expression: is not a valid JMESPath expression: {_parse_problem(exc)}",
            permanent=True,
            code=VALIDATION_ERROR,
        ) from None


def _parse_problem(exc: JMESPathError) -> str:
    if isinstance(exc, IncompleteExpressionError):
        return f"it ends too early (column {exc.lex_position})"
    if isinstance(exc, ParseError):
        # "Unexpected token: ]: Parse error at column 1, token "]" (RBRACKET), for expression:"
        return str(exc).splitlines()[0].removesuffix(", for expression:")
    return str(exc).splitlines()[0]
