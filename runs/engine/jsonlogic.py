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

# How deeply an expression may nest (objects and lists): the evaluator recurses per level,
# and an expression written as text escapes the request bodies' own depth check.
MAX_DEPTH = 48
TOO_DEEP = f"is nested deeper than {MAX_DEPTH} levels; split it into simpler conditions"

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
            expression = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExpressionError(
                f"is not valid JSON ({exc.msg} at character {exc.pos}); write a JSONLogic "
                'expression such as {">=": [{"var": "score"}, 5]}'
            ) from None
        except RecursionError:  # the decoder stops cleanly at the interpreter's limit
            raise ExpressionError(TOO_DEEP) from None
        except ValueError as exc:  # an integer of thousands of digits
            raise ExpressionError(f"is not valid JSON ({exc})") from None
    if depth(expression) > MAX_DEPTH:
        raise ExpressionError(TOO_DEEP)
    return expression


def depth(value: Any) -> int:
    """How many objects and lists nest in `value` (0 for a scalar), counted without
    recursion; counting stops a level past MAX_DEPTH."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        node, level = pending.pop()
        if isinstance(node, dict | list):
            level += 1
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                break
            pending.extend(
                (item, level) for item in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def problems(expression: Any) -> list[str]:
    """Every reason the (parsed) expression is not valid JSONLogic, as sentences."""
    if depth(expression) > MAX_DEPTH:
        return [TOO_DEEP]
    found: list[str] = []
    _walk(expression, found)
    return found


def _walk(node: Any, found: list[str]) -> None:
    # Bounded: problems() walks only expressions at most MAX_DEPTH deep.
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
    """Apply a parsed expression to `data`; one nested deeper than MAX_DEPTH (a definition
    saved before the limit) raises ExpressionError instead of exhausting the stack."""
    if depth(expression) > MAX_DEPTH:
        raise ExpressionError(TOO_DEEP)
    return jsonLogic(expression, data)
