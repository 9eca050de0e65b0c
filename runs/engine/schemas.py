"""JSON Schema checks on the step path: validators compiled once, and a quick yes.

Every node checks values against schemas (its input and output, a tool's arguments), and
most of those schemas are plain: objects with typed properties, required names, string enums,
lengths. jsonschema spends tens of microseconds on even a small valid value (it builds a
validator for every subschema it descends into), so:

- `validator(schema)` compiles a schema's Draft 2020-12 validator once;
- `quick_check(schema)` compiles a schema written only with the keywords of `_KEYWORDS` (and
  annotations) into a predicate that answers True only for a value that validator accepts.
  False means "not known": the caller asks jsonschema, which also writes every error message,
  so messages come from one place. A schema with any other keyword, or a malformed one, has
  no predicate (None) and always goes to jsonschema.

Schemas are parts of pinned definitions or adapters' constants, never changed in place.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jsonschema

from runs.engine import pinned

Check = Callable[[Any], bool]


class _Compiled:
    """A schema's quick predicate, and its jsonschema validator once one is needed."""

    def __init__(self, schema: Any):
        self.schema = schema
        self.quick = _compile(schema)
        self._validator: Any = None

    @property
    def validator(self) -> Any:
        if self._validator is None:
            self._validator = jsonschema.Draft202012Validator(self.schema)
        return self._validator


_BY_TEXT: OrderedDict[str, _Compiled] = OrderedDict()
_LOCK = threading.Lock()


def validator(schema: dict) -> Any:
    """The compiled Draft 2020-12 validator of `schema`."""
    return _compiled(schema).validator


def quick_check(schema: Any) -> Check | None:
    """The schema's quick predicate (True: valid for sure); None when the schema uses
    anything it does not cover."""
    return _compiled(schema).quick


def _compiled(schema: Any) -> _Compiled:
    return pinned.derived(schema, "schema", lambda: _by_text(schema))


def _by_text(schema: Any) -> _Compiled:
    # Versions of different entities often declare the same schema (the defaults, a shared
    # tool's parameters), so a schema met for the first time still reuses what was compiled
    # for an equal one: equal as JSON text, key order included, since the order of a
    # schema's keywords is the order its errors come in.
    text = json.dumps(schema, default=str)
    found = _BY_TEXT.get(text)
    if found is None:
        found = _Compiled(schema)
        with _LOCK:
            _BY_TEXT[text] = found
            while len(_BY_TEXT) > pinned.MAX_ENTRIES:
                _BY_TEXT.popitem(last=False)
    return found


# -- the predicates ------------------------------------------------------------------------

# Keywords that never make a value invalid. `format` is not among them: jsonschema may be
# asked to assert it.
_ANNOTATIONS = frozenset(
    ("title", "description", "default", "examples", "$comment", "deprecated", "readOnly")
    + ("writeOnly",)
)


def _is_integer(value: Any) -> bool:
    # jsonschema also counts a float without a fraction (1.0); that case is left to it.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    # Any numbers.Number is one for jsonschema; int and float are the JSON ones.
    return isinstance(value, int | float) and not isinstance(value, bool)


# The type checks of jsonschema's Draft 2020-12 type checker (bool is not a number there).
_TYPES: dict[str, Check] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
}


def _compile(schema: Any) -> Check | None:
    if schema is True or schema == {}:
        return lambda value: True
    if not isinstance(schema, dict):
        return None  # the schema `false`, or not a schema
    checks: list[Check] = []
    for keyword, argument in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        make = _KEYWORDS.get(keyword)
        check = make(argument, schema) if make is not None else None
        if check is None:
            return None
        checks.append(check)
    if len(checks) == 1:
        return checks[0]

    def every(value: Any) -> bool:
        return all(check(value) for check in checks)

    return every


def _type(argument: Any, schema: dict) -> Check | None:
    if isinstance(argument, str):
        return _TYPES.get(argument)
    if isinstance(argument, list) and argument and all(t in _TYPES for t in argument):
        options = [_TYPES[t] for t in argument]
        return lambda value: any(option(value) for option in options)
    return None


def _properties(argument: Any, schema: dict) -> Check | None:
    if not isinstance(argument, dict):
        return None
    compiled = [(name, _compile(sub)) for name, sub in argument.items()]
    if any(check is None for _, check in compiled):
        return None
    pairs: list[tuple[str, Check]] = compiled  # type: ignore[assignment]

    def properties(value: Any) -> bool:
        if not isinstance(value, dict):
            return True  # the keyword applies to objects only
        return all(name not in value or check(value[name]) for name, check in pairs)

    return properties


def _required(argument: Any, schema: dict) -> Check | None:
    if not isinstance(argument, list) or not all(isinstance(name, str) for name in argument):
        return None
    names = tuple(argument)
    return lambda value: not isinstance(value, dict) or all(name in value for name in names)


def _additional_properties(argument: Any, schema: dict) -> Check | None:
    if argument is True:
        return lambda value: True
    properties = schema.get("properties", {})
    if argument is not False or not isinstance(properties, dict):
        return None  # a schema for the extra properties: left to jsonschema
    known = frozenset(properties)
    return lambda value: not isinstance(value, dict) or all(key in known for key in value)


def _enum(argument: Any, schema: dict) -> Check | None:
    if not isinstance(argument, list):
        return None
    # A string equals only an equal string in jsonschema's comparison; other values (where
    # 1 and True differ) are left to it.
    strings = frozenset(each for each in argument if isinstance(each, str))
    return lambda value: isinstance(value, str) and value in strings


def _length(least: bool) -> Callable[[Any, dict], Check | None]:
    def make(argument: Any, schema: dict) -> Check | None:
        if not isinstance(argument, int) or isinstance(argument, bool) or argument < 0:
            return None
        if least:
            return lambda value: not isinstance(value, str) or len(value) >= argument
        return lambda value: not isinstance(value, str) or len(value) <= argument

    return make


def _items(argument: Any, schema: dict) -> Check | None:
    check = _compile(argument)  # with prefixItems (not covered) there is no predicate at all
    if check is None:
        return None
    return lambda value: not isinstance(value, list) or all(check(item) for item in value)


_KEYWORDS: dict[str, Callable[[Any, dict], Check | None]] = {
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional_properties,
    "enum": _enum,
    "minLength": _length(least=True),
    "maxLength": _length(least=False),
    "items": _items,
}
