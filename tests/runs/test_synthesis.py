"""Deterministic schema-valid values and prose: what the offline model and simulated tools say."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from runs.engine.synthesis import synthesize, text_answer
from tests.support.demo_schemas import FIXTURE_SCHEMAS, standard

pytestmark = pytest.mark.smoke

HAND_WRITTEN: dict[str, dict] = {
    "enum and const": {
        "type": "object",
        "properties": {
            "tone": {"type": "string", "enum": ["warm", "formal", "playful"]},
            "kind": {"const": "VIDEO"},
            "level": {"enum": [1, 2, 3]},
        },
        "required": ["tone", "kind", "level"],
    },
    "formats": {
        "type": "object",
        "properties": {
            "created_at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "contact": {"type": "string", "format": "email"},
            "homepage": {"type": "string", "format": "uri"},
            "request_id": {"type": "string", "format": "uuid"},
            "server": {"type": "string", "format": "ipv4"},
            "host": {"type": "string", "format": "hostname"},
        },
    },
    "string lengths": {
        "type": "object",
        "properties": {
            "headline": {"type": "string", "minLength": 40, "maxLength": 60},
            "code": {"type": "string", "maxLength": 3},
            "summary": {"type": "string", "minLength": 200},
            "fixed": {"type": "string", "minLength": 7, "maxLength": 7},
        },
    },
    "patterns": {
        "type": "object",
        "properties": {
            "ticket": {"type": "string", "pattern": r"^[A-Z]{3}-\d{4}$"},
            "stage": {"type": "string", "pattern": r"^(draft|final)-[a-z0-9]+$"},
            "address": {"type": "string", "pattern": r"^[^@\s]+@example\.org$"},
            "hex": {"type": "string", "pattern": r"^#[0-9a-fA-F]{6}$", "minLength": 7},
        },
    },
    "numbers": {
        "type": "object",
        "properties": {
            "extraction_confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "quality_score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "retries": {"type": "integer", "minimum": 3, "maximum": 3},
            "odd_bound": {"type": "integer", "exclusiveMinimum": 4.5, "maximum": 6},
            "price": {"type": "number", "multipleOf": 0.01, "minimum": 0.3, "maximum": 0.4},
            "bucket": {"type": "integer", "multipleOf": 5, "minimum": 11},
            "half": {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 0},
            "anything": {"type": "number"},
        },
        "required": ["retries"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "many": {"type": "array", "items": {"type": "integer"}, "minItems": 5},
            "one": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
            "unique_colours": {
                "type": "array",
                "items": {"enum": ["red", "green"]},
                "uniqueItems": True,
                "minItems": 2,
            },
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": False,
            },
            "with_a_seven": {
                "type": "array",
                "items": {"type": "integer"},
                "contains": {"const": 7},
            },
        },
    },
    "combinators": {
        "type": "object",
        "properties": {
            "either": {"oneOf": [{"type": "integer", "minimum": 10}, {"type": "string"}]},
            "nullable_first": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 3}]},
            "both": {"allOf": [{"type": "string"}, {"minLength": 5}, {"maxLength": 8}]},
            "maybe": {"type": ["null", "integer"], "minimum": 2},
        },
        "required": ["either", "nullable_first", "both", "maybe"],
    },
    "local references": {
        "$defs": {
            "scene": {
                "type": "object",
                "properties": {
                    "caption": {"type": "string"},
                    "duration_seconds": {"type": "number", "minimum": 1, "maximum": 10},
                },
                "required": ["caption", "duration_seconds"],
            }
        },
        "type": "object",
        "properties": {"scenes": {"type": "array", "items": {"$ref": "#/$defs/scene"}}},
        "required": ["scenes"],
    },
    "recursive tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["label", "children"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "draft 7 definitions": {
        "definitions": {"id": {"type": "string", "minLength": 4}},
        "type": "object",
        "properties": {"owner_id": {"$ref": "#/definitions/id"}},
        "required": ["owner_id"],
        "additionalProperties": False,
    },
    "object size": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
        "required": ["b"],
        "maxProperties": 2,
    },
    "open map": {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "minProperties": 2,
    },
    "untyped by name": {
        "properties": {"is_approved": {}, "selling_points": {}, "item_count": {}, "notes": {}},
        "required": ["is_approved", "selling_points", "item_count", "notes"],
    },
    "a plan that names only known steps": {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"enum": ["CHILD_ENTITY_INVOCATION", "TOOL_CALL", "THOUGHT"]},
                        "target": {"enum": ["content_analyst_agent", "nlp_parser"]},
                        "reason": {"type": "string"},
                    },
                    "required": ["type", "target"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["steps"],
    },
}


def assert_valid(schema: dict, value: Any) -> None:
    validator_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.mark.parametrize(("label", "schema"), FIXTURE_SCHEMAS, ids=[n for n, _ in FIXTURE_SCHEMAS])
def test_it_answers_every_io_contract_of_the_demo_hierarchy(label, schema):
    for seed in ("one", "two", "three"):
        value = synthesize(schema, seed=seed)
        assert_valid(standard(schema), value)
        assert set(value) == set(schema["properties"])  # optional properties too


@pytest.mark.parametrize("label", sorted(HAND_WRITTEN))
def test_it_honours_the_keywords_of_a_hand_written_schema(label):
    schema = HAND_WRITTEN[label]
    for seed in (f"{label}-{n}" for n in range(20)):
        assert_valid(schema, synthesize(schema, seed=seed))


def test_it_honours_draft_4_boolean_exclusive_bounds():
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": True},
            "level": {"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 2},
        },
        "required": ["ratio", "level"],
    }
    for n in range(10):
        value = synthesize(schema, seed=str(n))
        jsonschema.Draft4Validator(schema).validate(value)
        assert value["level"] == 2


def test_the_same_seed_gives_the_same_value_and_another_seed_another():
    schema = HAND_WRITTEN["local references"]
    assert synthesize(schema, seed="run-1:step-2") == synthesize(schema, seed="run-1:step-2")
    values = {json.dumps(synthesize(schema, seed=f"s{n}"), sort_keys=True) for n in range(10)}
    assert len(values) > 1


def test_property_names_make_realistic_values():
    schema = {
        "type": "object",
        "properties": {
            "video_url": {"type": "string"},
            "email": {"type": "string"},
            "extraction_confidence": {"type": "number"},
            "quality_score": {"type": "number"},
            "duration_seconds": {"type": "number"},
            "is_valid": {"type": "boolean"},
            "validation_errors": {"type": "array", "items": {"type": "string"}},
            "company_name": {"type": "string"},
            "job_description": {"type": "string"},
            "created_at": {"type": "string"},
        },
    }
    value = synthesize(schema, seed="names")
    assert value["video_url"].startswith("https://example.invalid/")
    assert value["video_url"].endswith(".mp4")
    assert value["email"].endswith("@example.invalid") and "." in value["email"].split("@")[0]
    assert 0 <= value["extraction_confidence"] <= 1
    assert 0 <= value["quality_score"] <= 1
    shortest, longest = 1, 120
    assert shortest <= value["duration_seconds"] <= longest
    assert value["is_valid"] is True
    assert value["validation_errors"] == []
    assert value["company_name"] and value["company_name"][0].isupper()
    assert len(value["job_description"].split()) > 5
    jsonschema.Draft202012Validator(
        {"format": "date-time"}, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(value["created_at"])


def test_a_score_with_a_wider_range_lands_high_in_that_range():
    value = synthesize({"type": "integer", "minimum": 0, "maximum": 100}, seed="x")
    assert 0 <= value <= 100
    score = synthesize({"type": "number", "minimum": 0, "maximum": 100}, seed="x")
    assert 0 <= score <= 100
    named = synthesize(
        {"type": "object", "properties": {"match_score": {"type": "number", "maximum": 100}}},
        seed="x",
    )
    assert 70 <= named["match_score"] <= 100


def test_a_plan_names_only_known_children_and_tools():
    schema = HAND_WRITTEN["a plan that names only known steps"]
    for n in range(10):
        plan = synthesize(schema, seed=f"plan-{n}")
        assert plan["steps"]
        assert {step["target"] for step in plan["steps"]} <= {"content_analyst_agent", "nlp_parser"}


def test_a_recursive_schema_ends():
    tree = synthesize(HAND_WRITTEN["recursive tree"], seed="tree")
    depth, node = 0, tree
    while node["children"]:
        node, depth = node["children"][0], depth + 1
    assert 0 < depth < 10


def test_an_impossible_or_empty_schema_does_not_crash():
    assert synthesize(False, seed="x") is None  # nothing is valid against false
    assert synthesize({}, seed="x") is not None
    assert synthesize(True, seed="x") is not None
    assert synthesize({"type": "null"}, seed="x") is None
    # A pattern Python cannot parse falls back to text instead of raising.
    assert isinstance(synthesize({"type": "string", "pattern": "(?<!"}, seed="x"), str)


def test_the_text_answer_is_deterministic_and_about_the_question():
    messages = [
        {"role": "system", "content": "You are a recruitment marketing writer."},
        {"role": "user", "content": "Summarise why engineers should join Acme Robotics."},
    ]
    answer = text_answer(messages, seed="a")
    assert answer == text_answer(messages, seed="a")
    assert "engineers should join Acme Robotics" in answer
    assert len({text_answer(messages, seed=str(n)) for n in range(10)}) > 1


def test_the_text_answer_reads_content_parts_and_tolerates_no_user_message():
    parts = [{"role": "user", "content": [{"type": "text", "text": "Describe the storyboard."}]}]
    assert "Describe the storyboard" in text_answer(parts, seed="a")
    assert text_answer([{"role": "system", "content": "Be brief."}], seed="a")


def test_the_same_answer_whatever_order_the_schemas_keys_come_in() -> None:
    """PostgreSQL's jsonb keeps an object's keys in an order of its own: a definition read
    back from it must get the answers it got from SQLite, so a demo converges on both."""
    properties = {
        "title": {"type": "string"},
        "requirements": {"type": "array", "items": {"type": "string"}},
        "extraction_confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "benefits": {"type": "array", "items": {"type": "string"}},
    }
    shuffled = dict(reversed(list(properties.items())))
    first = synthesize({"type": "object", "properties": properties}, seed="s")
    second = synthesize({"type": "object", "properties": shuffled}, seed="s")
    assert first == second
    assert list(first) == list(properties) and list(second) == list(shuffled)
