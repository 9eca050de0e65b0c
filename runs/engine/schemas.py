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
  `file://` reference is an unresolvable reference (a validation error), never a fetch;
- a reference that loops back to itself without reading any of the value (`{"$ref": "#"}`)
  is refused by `design_problems` and, saved before, is a validation error without
  jsonschema being asked (`UserValidator`): no user schema ends in a RecursionError.
"""

from __future__ import annotations

import inspect
import json
import sys
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


def validator(schema: dict[str, Any]) -> Any:
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


def _type(argument: Any, schema: dict[str, Any]) -> Check | None:
    if isinstance(argument, str):
        return _TYPES.get(argument)
    if isinstance(argument, list) and argument and all(t in _TYPES for t in argument):
        options = [_TYPES[t] for t in argument]
        return lambda value: any(option(value) for option in options)
    return None


def _properties(argument: Any, schema: dict[str, Any]) -> Check | None:
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


def _required(argument: Any, schema: dict[str, Any]) -> Check | None:
    if not isinstance(argument, list) or not all(isinstance(name, str) for name in argument):
        return None
    names = tuple(argument)
    return lambda value: not isinstance(value, dict) or all(name in value for name in names)


def _additional_properties(argument: Any, schema: dict[str, Any]) -> Check | None:
    if argument is True:
        return lambda value: True
    properties = schema.get("properties", {})
    if argument is not False or not isinstance(properties, dict):
        return None  # a schema for the extra properties: left to jsonschema
    known = frozenset(properties)
    return lambda value: not isinstance(value, dict) or all(key in known for key in value)


def _enum(argument: Any, schema: dict[str, Any]) -> Check | None:
    if not isinstance(argument, list):
        return None
    # A string equals only an equal string in jsonschema's comparison; other values (where
    # 1 and True differ) are left to it.
    strings = frozenset(each for each in argument if isinstance(each, str))
    return lambda value: isinstance(value, str) and value in strings


def _length(least: bool) -> Callable[[Any, dict[str, Any]], Check | None]:
    def make(argument: Any, schema: dict[str, Any]) -> Check | None:
        if not isinstance(argument, int) or isinstance(argument, bool) or argument < 0:
            return None
        if least:
            return lambda value: not isinstance(value, str) or len(value) >= argument
        return lambda value: not isinstance(value, str) or len(value) <= argument

    return make


def _items(argument: Any, schema: dict[str, Any]) -> Check | None:
    check = _compile(argument)  # with prefixItems (not covered) there is no predicate at all
    if check is None:
        return None
    return lambda value: not isinstance(value, list) or all(check(item) for item in value)


_KEYWORDS: dict[str, Callable[[Any, dict[str, Any]], Check | None]] = {
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
    # referencing declares its attrs classes with a `__dataclass_transform__` of its own,
    # which mypy does not read: their generated __init__ is unknown to it.
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


# The registry of every user schema: it holds only what a schema brings (jsonschema adds the
# metaschemas it ships with), and retrieves nothing.
LOCAL_ONLY: referencing.Registry[Any] = referencing.Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]


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


class SchemaFault(ValidationError):  # type: ignore[misc]  # jsonschema ships no types
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


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The keys `additionalProperties` applies to: neither in `properties` nor matched by a
    `patternProperties` pattern (a refused pattern matches nothing)."""
    properties = schema.get("properties", {})
    compiled = [_compiled_pattern(p)[0] for p in schema.get("patternProperties", {})]
    usable = [c for c in compiled if c is not None]
    return [
        key for key in instance if key not in properties and not any(c.search(key) for c in usable)
    ]


def _additional_properties_re2(
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
    "additionalProperties": _additional_properties_re2,
    "$ref": _local_only("$ref"),
    "$dynamicRef": _local_only("$dynamicRef"),
    "unevaluatedProperties": _local_only("unevaluatedProperties"),
    "unevaluatedItems": _local_only("unevaluatedItems"),
}
_UserValidator = jsonschema.validators.extend(_DRAFT, _USER_KEYWORDS, format_checker=FORMAT_CHECKER)
_UserValidatorNoUnevaluated = jsonschema.validators.extend(
    _UserValidator, {"unevaluatedProperties": _unevaluated_with_patterns}
)


class UserValidator:
    """The jsonschema validator of a schema a user wrote, behind the two questions every
    caller asks (`iter_errors`, `is_valid`): the one place its errors are iterated, so the
    one place where jsonschema's recursion is kept inside the stack.

    jsonschema recurses once or more for each reference it follows and each level of the
    value it descends into. A reference that loops back to itself without reading any of
    the value (saved before `design_problems` refused it) would recurse until the stack runs
    out, and the stack may run out inside `referencing`'s Rust code, where the RecursionError
    becomes a panic no `except` catches: so such a schema is a validation error without
    jsonschema being asked. A value nested deeper than the stack left allows, against a
    schema with references (without one, the recursion is as deep as the schema), is a
    validation error too; a RecursionError all the same is one."""

    def __init__(self, schema: Any, validator: Any, *, referring: bool):
        self.schema = schema
        self._validator = validator
        self._referring = referring
        self._loops = reference_loops(schema) if referring else []

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        if self._loops:
            yield SchemaFault(
                f"the schema cannot be checked: {reference_loop_message(_dotted(self._loops[0]))}"
            )
            return
        if self._referring:
            levels = _levels_left()
            if _deeper_than(instance, levels):
                yield ValidationError(too_deep_message(levels))
                return
        try:
            yield from self._validator.iter_errors(instance)
        except RecursionError:
            # Caught here, at the top, once the whole recursion has unwound: a handler deep
            # in it would have no stack left, and sibling branches would recurse again.
            yield ValidationError(too_deep_message())

    def is_valid(self, instance: Any) -> bool:
        return next(self.iter_errors(instance), None) is None


def too_deep_message(levels: int | None = None) -> str:
    limit = f" (more than {levels} levels)" if levels is not None else ""
    return f"the value is nested too deeply{limit} to be checked against its schema"


# The most Python frames jsonschema was measured to spend on one level of a value it reads
# through references: 2 on a tree of objects and arrays, 4 on an array of arrays, 8 on an
# object whose property refers through allOf back to it on each turn.
_FRAMES_PER_LEVEL = 8


def _levels_left() -> int:
    """How many levels of a value jsonschema can read from here before the stack runs out."""
    depth = 0
    frame = inspect.currentframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return max(0, sys.getrecursionlimit() - depth) // _FRAMES_PER_LEVEL


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether `value` nests objects and arrays more than `levels` deep. Iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        part, depth = stack.pop()
        if isinstance(part, dict):
            children: Any = part.values()
        elif isinstance(part, list | tuple):
            children = part
        else:
            continue
        if depth > levels:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _dotted(path: tuple[str | int, ...]) -> str:
    """`("$defs", "a", "allOf", 0, "$ref")` → `$defs.a.allOf[0].$ref`, as definition paths
    are written."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def user_validator(schema: Any) -> UserValidator:
    """A Draft 2020-12 validator of a schema a user wrote (see the module's docstring):
    patterns on RE2, references only inside the schema, no RecursionError out. Built anew:
    `validator` keeps one per pinned schema."""
    keywords = {keyword for _, part, _ in _parts(schema, None) for keyword in part}
    validator: Any
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        validator = _UserValidatorNoUnevaluated(schema, registry=LOCAL_ONLY)
    else:
        validator = _UserValidator(schema, registry=LOCAL_ONLY)
    return UserValidator(schema, validator, referring=bool(keywords & set(_REFERENCES)))


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
    resolver = _root_resolver(schema)
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
    problems += [(path, reference_loop_message()) for path in reference_loops(schema)]
    return problems


def _root_resolver(schema: Any) -> Resolver | None:
    if isinstance(schema, dict) and isinstance(schema.get("$id", ""), str):
        return LOCAL_ONLY.resolver_with_root(DRAFT202012.create_resource(schema))
    return None


def reference_loop_message(where: str = "") -> str:
    subject = f"its reference at {where}" if where else "this reference"
    return f"{subject} refers back to itself without reading any of the value (an endless loop)"


# The keywords that apply their schemas to the value itself, not to a part of it (as
# `properties`, `items`, `contains`, `propertyNames`, `unevaluated*`... do): a reference
# reached again through only these has read nothing on the way, and jsonschema would follow
# it until the stack runs out.
_IN_PLACE_ONE = frozenset(("not", "if", "then", "else"))
_IN_PLACE_LISTED = frozenset(("allOf", "anyOf", "oneOf"))
_IN_PLACE_NAMED = frozenset(("dependentSchemas",))
_REFERENCES = ("$ref", "$dynamicRef")

# A reference pointing somewhere `_parts` does not walk (an unknown keyword) makes more
# schemas to look at; a schema cannot hold more than its size, this only bounds the work.
_MAX_LOOP_NODES = 100_000


def reference_loops(schema: Any) -> list[tuple[str | int, ...]]:
    """The path of every `$ref` and `$dynamicRef` of `schema` that reaches itself again
    through only references and in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`,
    `if`/`then`/`else`, `dependentSchemas`): checking any value would recurse without end.
    A recursive schema that reads a part of the value on each turn (a tree's `children`
    `items`) has none. Iterative: any depth."""
    nodes: dict[int, tuple[dict[str, Any], Resolver | None, tuple[str | int, ...]]] = {}
    dynamic_anchors: dict[str, list[int]] = {}
    for path, part, part_resolver in _parts(schema, _root_resolver(schema)):
        nodes.setdefault(id(part), (part, part_resolver, path))
        anchor = part.get("$dynamicAnchor")
        if isinstance(anchor, str):
            dynamic_anchors.setdefault(anchor, []).append(id(part))

    edges: dict[int, list[int]] = {}
    # (the schema holding the reference, its keyword, the schemas the reference may mean)
    references: list[tuple[int, str, list[int]]] = []
    pending = list(nodes)

    def reach(
        child: dict[str, Any], resolver: Resolver | None, where: tuple[str | int, ...]
    ) -> int:
        if id(child) not in nodes:
            nodes[id(child)] = (child, resolver, where)
            pending.append(id(child))
        return id(child)

    while pending and len(nodes) <= _MAX_LOOP_NODES:
        key = pending.pop()
        part, part_resolver, path = nodes[key]
        found = edges.setdefault(key, [])
        for child, resolver in _in_place(part, part_resolver):
            found.append(reach(child, resolver, path))
        for keyword in _REFERENCES:
            ref = part.get(keyword)
            if not isinstance(ref, str) or part_resolver is None:
                continue
            targets: list[int] = []
            try:
                resolved = part_resolver.lookup(ref)
            except referencing.exceptions.Unresolvable:
                pass  # refused by design_problems, a validation error at run time
            else:
                if isinstance(resolved.contents, dict):
                    # A schema found only through a reference is reported where it is met.
                    targets.append(reach(resolved.contents, resolved.resolver, path))
            if keyword == "$dynamicRef" and "#" in ref:
                # Which schema a dynamic reference means depends on the way it was reached:
                # any with the anchor's name may be the one.
                targets += dynamic_anchors.get(ref.split("#", 1)[1], [])
            found += targets
            references.append((key, keyword, targets))

    return _looping(references, _components(edges), {key: node[2] for key, node in nodes.items()})


def _looping(
    references: list[tuple[int, str, list[int]]],
    component: dict[int, int],
    paths: dict[int, tuple[str | int, ...]],
) -> list[tuple[str | int, ...]]:
    """The paths of the references that may reach a schema of their own strongly connected
    component (themselves again), sorted."""
    loops: list[tuple[str | int, ...]] = []
    for key, keyword, targets in references:
        if any(component.get(target) == component[key] for target in targets):
            where = (*paths[key], keyword)
            if where not in loops:
                loops.append(where)
    return sorted(loops, key=lambda where: [str(part) for part in where])


def _in_place(
    part: dict[str, Any], resolver: Resolver | None
) -> Iterator[tuple[dict[str, Any], Resolver | None]]:
    """The subschemas of `part` applied to the same value, each with its resolver."""
    for keyword, value in part.items():
        children: list[Any] = []
        if keyword in _IN_PLACE_ONE:
            children = [value]
        elif keyword in _IN_PLACE_LISTED and isinstance(value, list):
            children = value
        elif keyword in _IN_PLACE_NAMED and isinstance(value, dict):
            children = list(value.values())
        for child in children:
            if not isinstance(child, dict):
                continue  # `true` and `false` refer to nothing
            if resolver is not None and isinstance(child.get("$id"), str):
                yield child, resolver.in_subresource(DRAFT202012.create_resource(child))
            else:
                yield child, resolver


def _components(edges: dict[int, list[int]]) -> dict[int, int]:
    """Each node's strongly connected component (Tarjan's algorithm, iterative): two nodes
    share one when each reaches the other."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    component: dict[int, int] = {}
    for root in edges:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges.get(root, ())))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = node
                        if member == node:
                            break
    return component


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
) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any], Resolver | None]]:
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
