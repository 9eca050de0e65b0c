"""The quick schema check never says yes where jsonschema says no."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from runs.engine import schemas

TOOL_PARAMETERS = {
    "type": "object",
    "properties": {
        "data": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "expression": {"type": "string", "enum": ["n"], "description": "what to select"},
    },
    "required": ["data", "expression"],
    "additionalProperties": False,
}


def _valid(schema: Any, value: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def test_it_accepts_a_valid_value_without_jsonschema() -> None:
    check = schemas.quick_check(TOOL_PARAMETERS)

    assert check is not None
    assert check({"data": {"n": 7}, "expression": "n"})


@pytest.mark.parametrize(
    "value",
    [
        {"data": {"n": 7}},  # a required property is missing
        {"data": {"n": "7"}, "expression": "n"},  # a wrong type below
        {"data": {"n": True}, "expression": "n"},  # a bool is no integer
        {"data": {"n": 7}, "expression": "m"},  # not in the enum
        {"data": {"n": 7}, "expression": "n", "extra": 1},  # additionalProperties false
        ["data", "expression"],
    ],
)
def test_it_leaves_an_invalid_value_to_jsonschema(value: Any) -> None:
    check = schemas.quick_check(TOOL_PARAMETERS)

    assert check is not None
    assert not check(value)
    assert not _valid(TOOL_PARAMETERS, value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
        {"type": "string", "format": "email"},
        {"type": "number", "minimum": 3},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"type": "string", "required": True}}},
        {"type": "strange"},
        {"minLength": -1},
        False,
    ],
)
def test_it_has_no_predicate_for_what_it_does_not_cover(schema: Any) -> None:
    assert schemas.quick_check(schema) is None


def _schema(rng: random.Random, depth: int = 0) -> Any:
    """A random schema, mostly of the keywords the quick check covers."""
    if rng.random() < 0.1:
        return rng.choice([True, {}, {"type": ["string", "null"]}, {"minimum": 1}])
    schema: dict[str, Any] = {}
    kind = rng.choice(["object", "array", "string", "integer", "number", "boolean", "null", None])
    if kind is not None:
        schema["type"] = kind
    if kind in ("object", None) and depth < 3 and rng.random() < 0.8:
        names = rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))
        schema["properties"] = {name: _schema(rng, depth + 1) for name in names}
        if rng.random() < 0.5:
            schema["required"] = rng.sample(["a", "b", "c"], rng.randint(0, 2))
        if rng.random() < 0.4:
            schema["additionalProperties"] = rng.choice([True, False])
    if kind in ("array", None) and depth < 3 and rng.random() < 0.5:
        schema["items"] = _schema(rng, depth + 1)
    if kind in ("string", None) and rng.random() < 0.5:
        if rng.random() < 0.5:
            schema["enum"] = rng.sample(["x", "yy", "", 1, True, None, "1"], rng.randint(0, 3))
        else:
            schema[rng.choice(["minLength", "maxLength"])] = rng.randint(0, 3)
    if rng.random() < 0.2:
        schema["description"] = "annotated"
    return schema


def _value(rng: random.Random, depth: int = 0) -> Any:
    choices: list[Any] = ["", "x", "yy", "1", "zzzz", 0, 1, -3, 1.0, 2.5, True, False, None]
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        names = rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 4))
        return {name: _value(rng, depth + 1) for name in names}
    if depth < 3 and roll < 0.45:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(choices)


def test_it_never_accepts_what_jsonschema_refuses() -> None:
    rng = random.Random(20240601)
    accepted = 0
    for _ in range(3000):
        schema = _schema(rng)
        check = schemas._compile(schema)  # uncached: the random schemas are thrown away
        for _ in range(5):
            value = _value(rng)
            if check is not None and check(value):
                accepted += 1
                assert _valid(schema, value), (schema, value)
    assert accepted > 1000  # the check covers the common cases, not only trivial ones


def test_it_reuses_the_validator_of_an_equal_schema() -> None:
    first = schemas.validator({"type": "object", "properties": {"q": {"type": "string"}}})
    second = schemas.validator({"type": "object", "properties": {"q": {"type": "string"}}})

    assert first is second
