"""simulated: deterministic values valid against the tool's output_schema."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from runs.engine.ports import VALIDATION_ERROR, ToolError
from tests.tools.conftest import context_for
from tools.builtin import simulated

pytestmark = pytest.mark.smoke

PARSER = {
    "tool_id": "nlp_parser",
    "implementation": "simulated",
    "output_schema": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "requirements": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["title", "requirements", "confidence"],
        "additionalProperties": False,
    },
}


def simulate(tool=PARSER, **arguments):
    return simulated.run(arguments, context_for(tool))


def test_it_returns_a_value_valid_against_the_output_schema():
    value = simulate(text="We are hiring a data analyst in Lisbon.")
    Draft202012Validator(PARSER["output_schema"]).validate(value)
    assert value["requirements"]


def test_the_same_tool_and_arguments_give_the_same_value():
    assert simulate(text="a") == simulate(text="a")
    assert simulate(text="a", n=1) == simulate(n=1, text="a")


def test_other_arguments_or_another_tool_give_another_value():
    assert simulate(text="a") != simulate(text="b")
    assert simulate(text="a") != simulate({**PARSER, "tool_id": "other_parser"}, text="a")


def test_a_simulated_tool_without_an_output_schema_says_what_to_add():
    with pytest.raises(ToolError, match="has no output_schema") as caught:
        simulate({**PARSER, "output_schema": None}, text="a")
    assert caught.value.permanent and caught.value.code == VALIDATION_ERROR


def test_an_invalid_output_schema_is_a_permanent_error():
    with pytest.raises(ToolError, match="output_schema is not a valid JSON Schema") as caught:
        simulate({**PARSER, "output_schema": {"type": "no-such-type"}}, text="a")
    assert caught.value.permanent


def test_it_never_hands_on_a_value_its_schema_refuses():
    impossible = {**PARSER, "output_schema": {"type": "string", "not": {"type": "string"}}}
    with pytest.raises(ToolError, match="cannot simulate a value") as caught:
        simulate(impossible, text="a")
    assert caught.value.permanent


def test_its_sandbox_gives_the_same_answer():
    assert simulated.sandbox({"text": "a"}, context_for(PARSER)) == simulate(text="a")
