"""User patterns run on RE2 (runs/engine/patterns.py) and user schemas resolve references only
inside themselves (runs/engine/schemas.py): the engine's side, no database."""

from __future__ import annotations

import time

import pytest
from jsonschema.exceptions import SchemaError

from runs.engine import patterns, review, schemas
from runs.engine.synthesis import synthesize
from runs.engine.validators import rule_problems

CATASTROPHIC = "^(a+)+$"
ATTACK = "a" * 40 + "!"  # Python's `re` backtracks through 2**40 ways of splitting the a's


def quickly(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    assert time.perf_counter() - started < 0.5
    return result


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"(?<x>a)\k<x>", "named backreferences"),
        (r"foo(?=bar)", "lookaheads"),
        (r"(?!x)y", "lookaheads"),
        (r"(?<=a)b", "lookbehinds"),
        (r"(?<!a)b", "lookbehinds"),
        (r"(?>a+)b", "atomic groups"),
        (r"a++", "possessive quantifiers"),
        (r"a{1001}", "repetition count above 1000"),
        (r"(a{100}){100}", "repetition count above 1000"),
        (r"[a-", "not a valid regular expression"),
    ],
)
def test_a_pattern_re2_cannot_take_is_refused_naming_what(pattern, named):
    reason = patterns.pattern_problem(pattern)
    assert reason is not None and named in reason
    with pytest.raises(patterns.PatternRefused):
        patterns.compile_pattern(pattern)


def test_a_catastrophic_pattern_matches_in_linear_time():
    compiled = patterns.compile_pattern(CATASTROPHIC)
    assert quickly(compiled.search, ATTACK) is False
    assert quickly(compiled.search, "a" * 100_000 + "!") is False
    assert compiled.search("aaaa") is True


def test_json_schemas_unicode_escapes_and_a_lone_surrogate_are_read():
    assert patterns.compile_pattern(r"^caf\u00e9$").search("café")
    assert patterns.compile_pattern(r"^\\u0041$").search("\\u0041")  # an escaped backslash
    assert patterns.compile_pattern("^a").search("a\ud800")


def test_a_schema_pattern_is_matched_by_re2_and_still_refuses_a_non_matching_value():
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}},
    }
    validator = schemas.user_validator(schema)
    assert validator.is_valid({"code": "ABC-1234"})
    [error] = validator.iter_errors({"code": "abc-12"})
    assert error.validator == "pattern" and error.message == "'abc-12' does not match " + repr(
        "^[A-Z]{3}-\\d{4}$"
    )
    # `$` is the end of the text, as in JSON Schema (ECMA-262), not before a last newline.
    assert not validator.is_valid({"code": "ABC-1234\n"})


def test_a_catastrophic_schema_pattern_fails_fast_everywhere_a_pattern_is():
    schema = {
        "type": "object",
        "properties": {"code": {"pattern": CATASTROPHIC}},
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
        "propertyNames": {"maxLength": 100},
    }
    errors = quickly(list, schemas.user_validator(schema).iter_errors({"code": ATTACK, ATTACK: 1}))
    assert [e.validator for e in errors] == ["pattern", "additionalProperties"]
    assert quickly(schemas.check_schema, schema) is None


def test_a_refused_pattern_saved_before_is_a_validation_error_at_run_time():
    schema = {"properties": {"x": {"pattern": r"(a)\1"}}, "patternProperties": {"(?=y)": {}}}
    messages = [e.message for e in schemas.user_validator(schema).iter_errors({"x": "aa"})]
    assert any("backreferences" in m for m in messages)
    assert any("lookaheads" in m for m in messages)
    with pytest.raises(SchemaError, match="backreferences"):
        schemas.check_schema(schema)


def test_unevaluated_properties_beside_pattern_properties_is_refused():
    schema = {"patternProperties": {"^x": {}}, "unevaluatedProperties": False}
    [error] = schemas.user_validator(schema).iter_errors({"xa": 1, "y": 2})
    assert "unevaluatedProperties" in error.message
    assert schemas.design_problems(schema) == [
        (("unevaluatedProperties",), schemas.UNEVALUATED_WITH_PATTERNS)
    ]


def test_a_regex_review_criterion_with_a_catastrophic_pattern_finishes_fast():
    check = quickly(review.regex_check, ATTACK, CATASTROPHIC)
    assert not check.passed and "does not match" in check.detail
    refused = review.regex_check("aa", r"(a)\1")
    assert not refused.passed and "backreferences" in refused.detail
    assert review.regex_check("done", "^done$").passed


def test_a_validation_rule_with_a_catastrophic_pattern_finishes_fast():
    rules = [{"rule": "code must be only a's", "validator": CATASTROPHIC}]
    [problem] = quickly(rule_problems, rules, {"code": ATTACK})
    assert "code does not match" in problem
    assert rule_problems(rules, {"code": "aaa"}) == []


def test_synthesis_from_a_pattern_is_bounded_and_skips_what_re2_refuses():
    nested = "(" * 12 + "a+" + ")+" * 12 + "$"  # every level multiplies the string it builds
    value = quickly(synthesize, {"type": "string", "pattern": nested}, seed="s")
    assert isinstance(value, str)
    assert synthesize({"type": "string", "pattern": "^[A-Z]{2}\\d$"}, seed="s")[2].isdigit()
    assert isinstance(synthesize({"type": "string", "pattern": r"(a)\1"}, seed="s"), str)


# -- references --------------------------------------------------------------------------------

LOCAL = {
    "$defs": {"code": {"type": "string", "minLength": 2}, "tag": {"$anchor": "tag"}},
    "type": "object",
    "properties": {"code": {"$ref": "#/$defs/code"}, "tag": {"$ref": "#tag"}},
}


def test_local_references_resolve():
    validator = schemas.user_validator(LOCAL)
    assert validator.is_valid({"code": "ab", "tag": 1})
    [error] = validator.iter_errors({"code": "a"})
    assert error.validator == "minLength"
    assert schemas.design_problems(LOCAL) == []


@pytest.mark.parametrize(
    "ref",
    [
        "http://127.0.0.1:9/x.json",
        "file:///etc/hostname",
        "other.json",
        "#/$defs/nothing",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_a_reference_outside_the_schema_is_a_design_problem_named_by_its_path(ref):
    schema = {"type": "object", "properties": {"doc": {"$ref": ref}}}
    [(path, message)] = schemas.design_problems(schema)
    assert path == ("properties", "doc", "$ref")
    assert repr(ref) in message and "does not resolve inside the schema" in message


@pytest.mark.parametrize("ref", ["http://127.0.0.1:9/x.json", "file:///etc/hostname"])
def test_a_reference_outside_the_schema_is_a_validation_error_at_run_time(ref):
    # unevaluatedProperties looks the root's reference up again, to find what it evaluated.
    schema = {"$ref": ref, "properties": {"doc": {"$ref": ref}}, "unevaluatedProperties": False}
    errors = list(schemas.user_validator(schema).iter_errors({"doc": 1, "more": 2}))
    assert [e.validator for e in errors] == ["$ref", "$ref", "unevaluatedProperties"]
    assert all(f"the reference {ref!r} does not resolve inside" in e.message for e in errors)
