"""A user schema whose reference loops back to itself without reading any of the value would
make jsonschema recurse until the stack runs out. It is refused at design time by the path
of the reference, and one that reaches validation anyway (saved before the check) is a
validation error, never a RecursionError. A recursive schema that reads a part of the value
on each turn keeps working."""

from __future__ import annotations

from typing import Any

import pytest

from entities.definition import check_json_schema
from runs.engine import schemas
from runs.engine.core import schema_problems

LOOP = "refers back to itself without reading any of the value (an endless loop)"

LOOPING = {
    "itself": ({"$ref": "#"}, [("$ref",)]),
    "a definition naming itself": (
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        [("$defs", "a", "$ref")],
    ),
    "two definitions through allOf": (
        {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
        [("$defs", "a", "$ref"), ("$defs", "b", "allOf", 0, "$ref")],
    ),
    "an anchor through if": (
        {"$defs": {"a": {"$anchor": "here", "if": {"$ref": "#here"}}}, "$ref": "#here"},
        [("$defs", "a", "if", "$ref")],
    ),
    "a dynamic reference through not and oneOf": (
        {"$dynamicAnchor": "n", "not": {"oneOf": [{"$dynamicRef": "#n"}, {"type": "null"}]}},
        [("not", "oneOf", 0, "$dynamicRef")],
    ),
    "two ways at every turn": (
        # jsonschema would try the second way at every level once the first came back: the
        # whole recursion ends at once instead.
        {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]},
        [("anyOf", 0, "$ref"), ("anyOf", 1, "$ref")],
    ),
    "dependentSchemas": (
        {"$defs": {"d": {"dependentSchemas": {"x": {"$ref": "#/$defs/d"}}}}, "$ref": "#/$defs/d"},
        [("$defs", "d", "dependentSchemas", "x", "$ref")],
    ),
}

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["name"],
        }
    },
    "$ref": "#/$defs/node",
}


def tree(levels: int, leaf: dict[str, Any] | None = None) -> dict[str, Any]:
    node = leaf if leaf is not None else {"name": "leaf"}
    for level in range(levels):
        node = {"name": f"n{level}", "children": [node]}
    return node


@pytest.mark.parametrize(("schema", "paths"), LOOPING.values(), ids=LOOPING.keys())
def test_a_reference_that_loops_without_reading_the_value_is_refused_by_its_path(schema, paths):
    assert schemas.design_problems(schema) == [(path, f"this reference {LOOP}") for path in paths]
    problems = check_json_schema(schema, "io_contract.input.schema")
    assert problems[0].path == "io_contract.input.schema." + schemas_path(paths[0])
    assert problems[0].message == f"this reference {LOOP}"


def schemas_path(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)[1:]


@pytest.mark.parametrize(("schema", "paths"), LOOPING.values(), ids=LOOPING.keys())
def test_a_looping_schema_that_reaches_validation_is_a_validation_error_naming_the_loop(
    schema, paths
):
    validator = schemas.user_validator(schema)
    value = {"x": 1}

    errors = list(validator.iter_errors(value))
    problems = schema_problems(schema, value)  # the engine's check of a step's value

    [error] = errors
    assert isinstance(error, schemas.SchemaFault)  # no value passes: not worth a retry
    assert error.message == (
        f"the schema cannot be checked: its reference at {schemas_path(paths[0])} {LOOP}"
    )
    assert problems == [f"(input): {error.message}"]
    assert not validator.is_valid(value)


def test_a_recursive_schema_that_reads_the_value_on_each_turn_keeps_working_on_deep_values():
    assert schemas.reference_loops(TREE) == []
    assert schemas.design_problems(TREE) == []
    assert check_json_schema(TREE, "io_contract.input.schema") == []
    validator = schemas.user_validator(TREE)

    # 40 levels of nodes are 81 levels of JSON, beyond the API's default nesting limit (64).
    assert validator.is_valid(tree(40))
    [error] = validator.iter_errors(tree(40, leaf={"name": 7}))
    assert error.validator == "type" and len(error.absolute_path) == 81


def test_a_recursive_array_schema_and_a_reference_beside_properties_are_not_loops():
    nested = {"type": "array", "items": {"$ref": "#"}}
    beside = {"properties": {"next": {"$ref": "#"}}, "allOf": [{"$ref": "#/$defs/s"}]}
    beside["$defs"] = {"s": {"type": "object", "contains": {"$ref": "#"}}}
    for schema in (nested, beside):
        assert schemas.design_problems(schema) == []
    assert schemas.user_validator(nested).is_valid([[[[]]]])


def test_a_value_nested_too_deeply_for_the_stack_is_a_validation_error_not_a_recursion_error():
    schema = {"type": "array", "items": {"$ref": "#"}}
    value: list = []
    for _ in range(5000):
        value = [value]

    errors = list(schemas.user_validator(schema).iter_errors(value))

    [error] = errors
    assert error.message.startswith("the value is nested too deeply (more than ")
    assert not isinstance(error, schemas.SchemaFault)  # the value's fault, not the schema's


def test_a_recursion_error_that_happens_all_the_same_is_a_validation_error():
    # Without a reference the recursion is as deep as the schema: a schema as deep as the
    # value, both deeper than the stack.
    schema: dict = {"type": "array"}
    value: list = []
    for _ in range(2000):
        schema = {"type": "array", "items": schema}
        value = [value]

    [error] = schemas.user_validator(schema).iter_errors(value)

    assert error.message == "the value is nested too deeply to be checked against its schema"
