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

Every schema a user writes (an entity's input and output, a tool's parameters and result, a
review criterion's, an approval's edit) is validated by `user_validator`, the one place that
builds a validator for it, and checked by `check_schema`; `design_problems` is what a
definition must not be saved with. There:

- `pattern`, `patternProperties` (and the `additionalProperties` they narrow) and the
  `regex` format match with RE2 (`runs/engine/patterns.py`), in linear time; a pattern RE2
  refuses is a validation error, never run by Python's `re`;
- `$ref` and `$dynamicRef` resolve only inside the schema itself (`#/...` pointers, `$defs`,
  `$id` and anchors of the same document): the registry retrieves nothing, so a `http://` or
  `file://` reference is an unresolvable reference (a validation error), never a fetch.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError, ValidationError
from referencing.jsonschema import DRAFT202012

from runs.engine import patterns, pinned

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
            self._validator = user_validator(self.schema)
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


# -- schemas a user wrote --------------------------------------------------------------------

_DRAFT = jsonschema.Draft202012Validator


def _retrieve_nothing(uri: str) -> referencing.Resource[Any]:
    # Called for every URI the schema itself does not hold: a reference is never fetched.
    raise referencing.exceptions.NoSuchResource(ref=uri)


# The registry of every user schema: it holds only what a schema brings (jsonschema adds the
# metaschemas it ships with), and retrieves nothing.
LOCAL_ONLY: referencing.Registry[Any] = referencing.Registry(retrieve=_retrieve_nothing)


def _is_regex(instance: Any) -> bool:
    if isinstance(instance, str):
        patterns.compile_pattern(instance)
    return True


# Draft 2020-12's format checks, with `regex` read by RE2: the metaschema asserts it on every
# `pattern` and `patternProperties` key when a schema is checked.
FORMAT_CHECKER = jsonschema.FormatChecker(_DRAFT.FORMAT_CHECKER.checkers)
FORMAT_CHECKER.checks("regex", raises=patterns.PatternRefused)(_is_regex)

_META = _DRAFT(_DRAFT.META_SCHEMA, format_checker=FORMAT_CHECKER)


def refused_pattern_message(pattern: Any, reason: str) -> str:
    return f"the pattern {pattern!r} cannot be used: {reason}"


def unresolvable_reference_message(ref: Any) -> str:
    return (
        f"the reference {ref!r} does not resolve inside the schema: only references within "
        "the same schema (#/$defs/…) are followed, never a URL or a file"
    )


class SchemaFault(ValidationError):
    """A validation error that is the schema's fault (a pattern RE2 refuses, a reference that
    does not resolve inside it): no value passes, so trying again cannot help."""


UNEVALUATED_WITH_PATTERNS = (
    "unevaluatedProperties cannot be combined with patternProperties in one schema; use "
    "additionalProperties, or list the properties"
)


def _compiled_pattern(pattern: Any) -> tuple[patterns.UserPattern | None, str]:
    try:
        return patterns.compile_pattern(pattern), ""
    except patterns.PatternRefused as exc:
        return None, refused_pattern_message(pattern, exc.reason)


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    compiled, refusal = _compiled_pattern(pattern)
    if compiled is None:
        yield SchemaFault(refusal)
    elif not compiled.search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, argument: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in argument.items():
        compiled, refusal = _compiled_pattern(pattern)
        if compiled is None:
            yield SchemaFault(refusal)
            continue
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict, schema: dict) -> list[str]:
    """The keys `additionalProperties` applies to: neither in `properties` nor matched by a
    `patternProperties` pattern (a refused pattern matches nothing)."""
    properties = schema.get("properties", {})
    compiled = [_compiled_pattern(p)[0] for p in schema.get("patternProperties", {})]
    usable = [c for c in compiled if c is not None]
    return [
        key for key in instance if key not in properties and not any(c.search(key) for c in usable)
    ]


def _additional_properties(
    validator: Any, argument: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    # jsonschema's own, with the keys matched by RE2 (its version runs `re` on the patterns).
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(argument, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], argument, path=extra)
    elif not argument and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            regexes = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {regexes}")
        else:
            names = sorted(extras, key=str)
            verb = "was" if len(names) == 1 else "were"
            listed = ", ".join(repr(each) for each in names)
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


def _local_only(keyword: str) -> Callable[..., Iterator[Any]]:
    """jsonschema's own keyword, with a reference that does not resolve inside the schema
    answered as a validation error (it raises otherwise)."""
    original = _DRAFT.VALIDATORS[keyword]

    def check(validator: Any, argument: Any, instance: Any, schema: Any) -> Iterator[Any]:
        try:
            yield from original(validator, argument, instance, schema)
        except referencing.exceptions.Unresolvable as exc:
            yield SchemaFault(unresolvable_reference_message(getattr(exc, "ref", argument)))

    return check


def _unevaluated_with_patterns(
    validator: Any, argument: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    # jsonschema finds the keys `unevaluatedProperties` applies to with `re`, through
    # patternProperties anywhere in the schema: never on a user pattern.
    if validator.is_type(instance, "object"):
        yield SchemaFault(UNEVALUATED_WITH_PATTERNS)


_USER_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "$ref": _local_only("$ref"),
    "$dynamicRef": _local_only("$dynamicRef"),
    "unevaluatedProperties": _local_only("unevaluatedProperties"),
    "unevaluatedItems": _local_only("unevaluatedItems"),
}
_UserValidator = jsonschema.validators.extend(_DRAFT, _USER_KEYWORDS, format_checker=FORMAT_CHECKER)
_UserValidatorNoUnevaluated = jsonschema.validators.extend(
    _UserValidator, {"unevaluatedProperties": _unevaluated_with_patterns}
)


def user_validator(schema: Any) -> Any:
    """A Draft 2020-12 validator of a schema a user wrote (see the module's docstring):
    patterns on RE2, references only inside the schema. Built anew: `validator` keeps one
    per pinned schema."""
    keywords = {keyword for _, part, _ in _parts(schema, None) for keyword in part}
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        return _UserValidatorNoUnevaluated(schema, registry=LOCAL_ONLY)
    return _UserValidator(schema, registry=LOCAL_ONLY)


def check_schema(schema: Any) -> None:
    """Raise SchemaError when `schema` is not a valid Draft 2020-12 JSON Schema. Its patterns
    are read by RE2, never compiled by `re`; a pattern RE2 refuses is an error naming why."""
    for error in _META.iter_errors(schema):
        if isinstance(error.cause, patterns.PatternRefused):
            error.message = refused_pattern_message(error.instance, error.cause.reason)
        raise SchemaError.create_from(error)


def design_problems(schema: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """What a schema must not be saved with, each with the path of its keyword: a pattern
    RE2 refuses, a `$ref` that does not resolve inside the schema (a URL, a file, a pointer
    to nothing), unevaluatedProperties beside patternProperties."""
    resolver = None
    if isinstance(schema, dict) and isinstance(schema.get("$id", ""), str):
        resolver = LOCAL_ONLY.resolver_with_root(DRAFT202012.create_resource(schema))
    problems: list[tuple[tuple[str | int, ...], str]] = []
    unevaluated: tuple[str | int, ...] | None = None
    pattern_keys = False
    for path, part, part_resolver in _parts(schema, resolver):
        pattern = part.get("pattern")
        if isinstance(pattern, str) and (reason := patterns.pattern_problem(pattern)):
            problems.append(((*path, "pattern"), refused_pattern_message(pattern, reason)))
        keyed = part.get("patternProperties")
        if isinstance(keyed, dict):
            pattern_keys = True
            for key in keyed:
                if reason := patterns.pattern_problem(key):
                    problems.append(
                        ((*path, "patternProperties", key), refused_pattern_message(key, reason))
                    )
        if "unevaluatedProperties" in part and unevaluated is None:
            unevaluated = (*path, "unevaluatedProperties")
        for keyword in ("$ref", "$dynamicRef"):
            ref = part.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                if part_resolver is None:
                    raise referencing.exceptions.Unresolvable(ref=ref)
                part_resolver.lookup(ref)
            except referencing.exceptions.Unresolvable:
                problems.append(((*path, keyword), unresolvable_reference_message(ref)))
    if unevaluated is not None and pattern_keys:
        problems.append((unevaluated, UNEVALUATED_WITH_PATTERNS))
    return problems


# The keywords whose value is a schema, a map of names to schemas, or a list of schemas.
_ONE_SCHEMA = frozenset(
    ("additionalProperties", "unevaluatedProperties", "items", "contains", "propertyNames")
    + ("not", "if", "then", "else", "unevaluatedItems", "additionalItems", "contentSchema")
)
_NAMED_SCHEMAS = frozenset(
    ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
)
_LISTED_SCHEMAS = frozenset(("allOf", "anyOf", "oneOf", "prefixItems", "items"))

Resolver = Any


def _parts(
    schema: Any, resolver: Resolver | None
) -> Iterator[tuple[tuple[str | int, ...], dict, Resolver | None]]:
    """Every (sub)schema of `schema` with its path, and the resolver its references resolve
    with (its base URI moved by each `$id` on the way). Iterative: any depth."""
    stack: list[tuple[Any, tuple[str | int, ...], Resolver | None]] = [(schema, (), resolver)]
    while stack:
        part, path, part_resolver = stack.pop()
        if not isinstance(part, dict):
            continue
        if path and part_resolver is not None and isinstance(part.get("$id"), str):
            part_resolver = part_resolver.in_subresource(DRAFT202012.create_resource(part))
        yield path, part, part_resolver
        children: list[tuple[Any, tuple[str | int, ...], Resolver | None]] = []
        for keyword, value in part.items():
            if keyword in _ONE_SCHEMA and isinstance(value, dict):
                children.append((value, (*path, keyword), part_resolver))
            elif keyword in _NAMED_SCHEMAS and isinstance(value, dict):
                children.extend(
                    (each, (*path, keyword, name), part_resolver) for name, each in value.items()
                )
            elif keyword in _LISTED_SCHEMAS and isinstance(value, list):
                children.extend(
                    (each, (*path, keyword, index), part_resolver)
                    for index, each in enumerate(value)
                )
        stack.extend(reversed(children))
