"""JSONLogic: the condition language of child links, exit conditions and checkpoints.

Expressions arrive as objects or as JSON text (the seed writes them as strings). `parse`
turns either into an object, `problems` names what is wrong with one without evaluating it,
and `evaluate` applies it to the run state (panzi-json-logic does the evaluation).
"""

from __future__ import annotations

import json
from typing import Any

from json_logic import jsonLogic
from json_logic.builtins import BUILTINS

# Operators apply() handles itself, besides the builtin table.
_CONTROL_OPERATORS = {"if", "?:", "and", "or", "map", "filter", "reduce", "all", "some", "none"}
OPERATORS = frozenset(BUILTINS) | _CONTROL_OPERATORS


class ExpressionError(ValueError):
    """An expression that cannot be read as JSONLogic."""


def parse(expression: Any) -> Any:
    """Return the expression as JSON data; JSON text is decoded."""
    if isinstance(expression, str):
        text = expression.strip()
        if not text:
            raise ExpressionError(
                'is empty; write a JSONLogic expression such as {">=": [{"var": "score"}, 5]}'
            )
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExpressionError(
                f"is not valid JSON ({exc.msg} at character {exc.pos}); write a JSONLogic "
                'expression such as {">=": [{"var": "score"}, 5]}'
            ) from None
    return expression


def problems(expression: Any) -> list[str]:
    """Every reason the (parsed) expression is not valid JSONLogic, as sentences."""
    found: list[str] = []
    _walk(expression, found)
    return found


def _walk(node: Any, found: list[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, found)
        return
    if not isinstance(node, dict):
        return
    if len(node) != 1:
        keys = ", ".join(repr(k) for k in node) or "none"
        found.append(f"an operation must have exactly one operator key (found {keys})")
        return
    ((operator, args),) = node.items()
    if operator not in OPERATORS:
        known = ", ".join(sorted(OPERATORS))
        found.append(f"uses the unknown operator {operator!r}; known operators are {known}")
        return
    _walk(args, found)


def evaluate(expression: Any, data: dict[str, Any]) -> Any:
    """Apply a parsed expression to `data`."""
    return jsonLogic(expression, data)
