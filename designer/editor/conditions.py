"""Conditions built as rows: (field, operator, value) joined by "all" or "any", made into the
JSONLogic the engine evaluates, and read back from it.

A designer should never have to write `{"and": [{"==": [{"var": "input.country"}, "FR"]}]}`;
the rows write it. What rows cannot say (nested and/or, other operators) is not thrown away:
`to_rows` answers None and the editor keeps the expression in its raw JSONLogic box, which
always works. Both directions are pure functions, so the round trip is tested without Django.

The fields a condition reads are the run state's paths, as `runs.engine.plan` builds it:
`input.<name>` for the run's input, `iteration`, and each step's output under the step's
name (`<step name>`, `<step name>.<key>`), its keys also at the top level.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from runs.engine import jsonlogic

# operator key → (plain words, JSONLogic operator)
OPERATORS: dict[str, tuple[str, str]] = {
    "is": ("is", "=="),
    "is_not": ("is not", "!="),
    "gt": ("greater than", ">"),
    "gte": ("at least", ">="),
    "lt": ("less than", "<"),
    "lte": ("at most", "<="),
    "contains": ("contains", "in"),
    "one_of": ("is one of", "in"),
    "empty": ("is empty", "!"),
    "not_empty": ("is not empty", "!!"),
}
OPERATOR_CHOICES = [(key, words) for key, (words, _logic) in OPERATORS.items()]
NO_VALUE = frozenset({"empty", "not_empty"})
JOINS = {"all": "and", "any": "or"}
JOIN_CHOICES = [("all", "all of these hold"), ("any", "any of these holds")]
_COMPARISONS = {logic: key for key, (_w, logic) in OPERATORS.items() if logic != "in"}
MOST_FIELD = 200
# A number as JSON writes one ("inf" and "nan" are text to a designer).
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
MOST_VALUE = 2000


class ConditionError(ValueError):
    """A row that cannot be made into JSONLogic, said in the designer's words."""


@dataclass(frozen=True)
class Row:
    """One line of a condition: the state path it reads, how it compares, the value."""

    field: str
    operator: str
    value: Any = None


def to_logic(rows: list[Row], join: str = "all") -> Any:
    """The JSONLogic of `rows` (None for no rows): one row alone is its comparison, several
    are joined by "and" ("all") or "or" ("any")."""
    made = [_comparison(row) for row in rows]
    if not made:
        return None
    if len(made) == 1:
        return made[0]
    return {JOINS[join]: made}


def _comparison(row: Row) -> dict[str, Any]:
    field = {"var": row.field}
    logic = OPERATORS[row.operator][1]
    if row.operator in NO_VALUE:
        return {logic: field}
    if row.operator == "contains":
        return {"in": [row.value, field]}
    if row.operator == "one_of":
        return {"in": [field, list(row.value)]}
    return {logic: [field, row.value]}


def to_rows(expression: Any) -> tuple[list[Row], str] | None:
    """The rows and join that make exactly `expression`, or None when rows cannot say it (it
    is then kept as JSONLogic). None and "" are no condition: no rows."""
    if expression in (None, ""):
        return [], "all"
    try:
        expression = jsonlogic.parse(expression)
    except jsonlogic.ExpressionError:
        return None
    if isinstance(expression, dict) and len(expression) == 1:
        ((operator, args),) = expression.items()
        if operator in ("and", "or") and isinstance(args, list) and len(args) >= 2:
            rows = [_row(item) for item in args]
            if any(row is None for row in rows):
                return None
            join = "all" if operator == "and" else "any"
            return [row for row in rows if row is not None], join
    row = _row(expression)
    return None if row is None else ([row], "all")


def _path(node: Any) -> str | None:
    """The state path of `{"var": "path"}` (only this plain form), else None."""
    if isinstance(node, dict) and len(node) == 1 and "var" in node:
        path = node["var"]
        if isinstance(path, str) and path:
            return path
    return None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _row(node: Any) -> Row | None:
    if not isinstance(node, dict) or len(node) != 1:
        return None
    ((operator, args),) = node.items()
    if operator in ("!", "!!"):
        path = _path(args)  # only the form to_logic writes: {"!": {"var": …}}
        return None if path is None else Row(path, "empty" if operator == "!" else "not_empty")
    if not isinstance(args, list) or len(args) != 2:
        return None
    left, right = args
    if operator == "in":
        if _path(left) and isinstance(right, list) and all(_scalar(v) for v in right):
            return Row(_path(left) or "", "one_of", list(right))
        if _path(right) and _scalar(left) and left is not None:
            return Row(_path(right) or "", "contains", left)
        return None
    if operator in _COMPARISONS and _path(left) and _scalar(right):
        return Row(_path(left) or "", _COMPARISONS[operator], right)
    return None


# -- values as typed in a text box ------------------------------------------------------------


def parse_value(text: str, operator: str) -> Any:
    """The value typed for `operator`: numbers as numbers, true/false/null as such, "quoted"
    text as exactly that text, a list (comma-separated, or JSON) for "is one of"; anything
    else is the text itself."""
    if operator in NO_VALUE:
        return None
    text = text.strip()
    if len(text) > MOST_VALUE:
        raise ConditionError(f"is longer than {MOST_VALUE} characters")
    if "\x00" in text:
        raise ConditionError("contains a NUL character")
    if operator == "one_of":
        if text.startswith("["):
            items = _json(text)
            if not isinstance(items, list) or not all(_scalar(v) for v in items):
                raise ConditionError("must be a list of plain values, e.g. FR, DE, 3")
            return items
        items = [_typed(part) for part in text.split(",") if part.strip()]
        if not items:
            raise ConditionError("needs at least one value, separated by commas")
        return items
    if not text:
        raise ConditionError('needs a value (write "" for empty text)')
    return _typed(text)


def _typed(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false", "null") or text.startswith('"'):
        return _json(text)
    if not _NUMBER.fullmatch(text):
        return text
    number = float(text)
    if not math.isfinite(number):
        raise ConditionError(f"{text} is not a number a condition can use (too large)")
    if text.lstrip("-").isdigit():
        return int(text)
    return number


def _json(text: str) -> Any:
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ConditionError(f"{text[:40]} is not a value: close its quotes or brackets") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConditionError("is too large a number")
    return value


def _refuse_constant(name: str) -> Any:
    raise ConditionError(f"{name} is not a number a condition can use")


def show_value(value: Any, operator: str) -> str:
    """The text that `parse_value` reads back as `value`."""
    if operator in NO_VALUE:
        return ""
    if operator == "one_of":
        parts = [show_value(v, "is") for v in value]
        if any("," in part for part in parts):
            return json.dumps(value, ensure_ascii=False)
        return ", ".join(parts)
    if isinstance(value, str):
        try:
            same = _typed(value) == value and type(_typed(value)) is str
        except ConditionError:
            same = False
        if same and value == value.strip() and value:
            return value
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value)


def check_field(path: str) -> str:
    """The state path typed as a condition's field, or ConditionError."""
    path = path.strip()
    if not path:
        raise ConditionError("pick the field the condition reads")
    if len(path) > MOST_FIELD or "\x00" in path:
        raise ConditionError(f"must be a field name of at most {MOST_FIELD} characters")
    return path


def read_expression(text: str) -> Any:
    """JSONLogic typed as text, decoded and checked as the services check it (the same
    parser and the same list of operators), or ConditionError naming what is wrong."""
    if not text.strip():
        return None
    try:
        expression = jsonlogic.parse(text)
    except jsonlogic.ExpressionError as exc:
        raise ConditionError(f"is not JSONLogic: it {exc}") from None
    problems = jsonlogic.problems(expression)
    if problems:
        raise ConditionError(f"is not valid JSONLogic: it {problems[0]}")
    return expression


def show_expression(expression: Any) -> str:
    """An expression as the raw box shows it."""
    if expression in (None, ""):
        return ""
    if isinstance(expression, str):
        return expression
    return json.dumps(expression, ensure_ascii=False)


# -- the run state's paths, and mappings onto them ---------------------------------------------


def input_paths(definition: dict) -> list[str]:
    """What a condition or a mapping can read before any step: the run's input fields
    (`input.<name>`, from the input contract) and the loop's `iteration`."""
    schema = _get(definition, "io_contract", "input", "schema")
    names = _property_names(schema)
    return [f"input.{name}" for name in names] + ["iteration"]


def output_paths(step_name: str, output_schema: Any) -> list[str]:
    """Where a step's output lands in the state: under the step's name, each of its output
    fields under `<name>.<field>` and at the top level (runs.engine.plan.apply_output)."""
    if not step_name or "." in step_name:  # a dotted name cannot be read back by `var`
        return []
    fields = _property_names(output_schema)
    return [step_name, *(f"{step_name}.{field}" for field in fields), *fields]


def schema_fields(schema: Any) -> list[str]:
    """The property names of a JSON Schema object (an input contract, a tool's parameters)."""
    return _property_names(schema)


def _property_names(schema: Any) -> list[str]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    return [name for name in properties if isinstance(name, str)][:100]


def _get(node: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def parse_source(text: str, paths: list[str]) -> Any:
    """A mapping's value as typed: one of the offered `paths` reads that field
    (`{"var": path}`); JSON that starts with { or [ is an expression or a literal kept as it
    is; anything else is a constant, typed as a condition's value is."""
    text = text.strip()
    if text in paths:
        return {"var": text}
    if text.startswith(("{", "[")):
        value = _json(text)
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in jsonlogic.OPERATORS:
            problems = jsonlogic.problems(jsonlogic.parse(value))
            if problems:
                raise ConditionError(f"is not valid JSONLogic: it {problems[0]}")
        return value
    return _typed(text)


def show_source(value: Any, paths: list[str]) -> str:
    """The text `parse_source` reads back as `value`."""
    path = _path(value)
    if path is not None and path in paths:
        return path
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value in paths:
        return json.dumps(value, ensure_ascii=False)
    return show_value(value, "is")
