"""The condition builder as pure functions: rows make the JSONLogic the engine evaluates,
JSONLogic reads back into the same rows, and what rows cannot say is left to the raw box."""

from __future__ import annotations

import pytest

from designer.editor import conditions
from designer.editor.conditions import ConditionError, Row
from runs.engine import jsonlogic
from runs.engine import plan as plans

ROWS = [
    Row("input.country", "is", "FR"),
    Row("input.count", "gte", 3),
    Row("input.tier", "one_of", ["gold", "silver", 2]),
    Row("Research.summary", "contains", "budget"),
    Row("input.note", "empty"),
    Row("input.owner", "not_empty"),
    Row("input.score", "lt", 0.5),
    Row("input.flag", "is_not", True),
]


def test_rows_make_the_jsonlogic_of_and_and_or():
    rows = [Row("input.country", "is", "FR"), Row("input.count", "gt", 3)]
    assert conditions.to_logic(rows, "all") == {
        "and": [{"==": [{"var": "input.country"}, "FR"]}, {">": [{"var": "input.count"}, 3]}]
    }
    assert next(iter(conditions.to_logic(rows, "any"))) == "or"
    assert conditions.to_logic(rows[:1]) == {"==": [{"var": "input.country"}, "FR"]}
    assert conditions.to_logic([]) is None


@pytest.mark.parametrize("join", ["all", "any"])
def test_rows_come_back_from_their_jsonlogic(join):
    assert conditions.to_rows(conditions.to_logic(ROWS, join)) == (ROWS, join)
    for row in ROWS:
        assert conditions.to_rows(conditions.to_logic([row])) == ([row], "all")


def test_jsonlogic_written_as_text_reads_back_too():
    assert conditions.to_rows('{"<=": [{"var": "iteration"}, 3]}') == (
        [Row("iteration", "lte", 3)],
        "all",
    )
    assert conditions.to_rows(None) == ([], "all")


@pytest.mark.parametrize(
    "expression",
    [
        {"and": [{"or": [{"==": [{"var": "a"}, 1]}, {"==": [{"var": "b"}, 2]}]}, True]},
        {"===": [{"var": "a"}, 1]},
        {"==": [1, {"var": "a"}]},
        {"==": [{"var": ["a", 0]}, 1]},
        {"==": [{"var": "a"}, {"var": "b"}]},
        {"and": []},
        {"!": [{"var": "a"}]},
        {"in": [{"var": "a"}, [[1]]]},
        "{not json",
        True,
    ],
)
def test_what_rows_cannot_say_is_kept_as_jsonlogic(expression):
    assert conditions.to_rows(expression) is None


def test_the_rows_jsonlogic_holds_as_the_engine_evaluates_it():
    logic = conditions.to_logic(
        [Row("input.country", "one_of", ["FR", "DE"]), Row("Research.summary", "contains", "x")]
    )
    state = plans.apply_output({}, "Research", {"summary": "a x b"})
    assert plans.holds(logic, plans.logic_data(state, {"country": "FR"}, 1))
    assert not plans.holds(logic, plans.logic_data(state, {"country": "IT"}, 1))
    assert jsonlogic.problems(logic) == []


@pytest.mark.parametrize(
    ("text", "operator", "value"),
    [
        ("42", "is", 42),
        ("-1.5", "gt", -1.5),
        ('"42"', "is", "42"),
        ("true", "is", True),
        ("null", "is", None),
        ("France", "is", "France"),
        ("inf", "is", "inf"),
        ("FR, DE, 3", "one_of", ["FR", "DE", 3]),
        ('["a,b", 1]', "one_of", ["a,b", 1]),
        ("", "empty", None),
    ],
)
def test_values_are_typed_and_shown_back_as_typed(text, operator, value):
    parsed = conditions.parse_value(text, operator)
    assert parsed == value and type(parsed) is type(value)
    assert conditions.parse_value(conditions.show_value(value, operator), operator) == value


@pytest.mark.parametrize(
    ("text", "operator", "says"),
    [
        ("1e400", "is", "too large"),
        ("", "is", "needs a value"),
        ('"open', "is", "close its quotes"),
        ("a\x00b", "is", "NUL"),
        (",,", "one_of", "at least one"),
        ('[{"a": 1}]', "one_of", "plain values"),
        ("x" * 3000, "is", "longer than"),
    ],
)
def test_a_value_that_cannot_be_one_is_named(text, operator, says):
    with pytest.raises(ConditionError, match=says):
        conditions.parse_value(text, operator)


def test_raw_jsonlogic_is_checked_as_the_services_check_it():
    assert conditions.read_expression('{">": [{"var": "a"}, 1]}') == {">": [{"var": "a"}, 1]}
    assert conditions.read_expression("  ") is None
    with pytest.raises(ConditionError, match="unknown operator 'nope'"):
        conditions.read_expression('{"nope": [1]}')
    with pytest.raises(ConditionError, match="not JSONLogic"):
        conditions.read_expression("{")
    with pytest.raises(ConditionError, match="nested deeper"):
        conditions.read_expression("[" * 200 + "]" * 200)


def test_the_paths_offered_are_the_ones_the_engine_writes():
    definition = {"io_contract": {"input": {"schema": {"properties": {"country": {}}}}}}
    assert conditions.input_paths(definition) == ["input.country", "iteration"]
    assert conditions.output_paths("Research", {"properties": {"summary": {}}}) == [
        "Research",
        "Research.summary",
        "summary",
    ]
    state = plans.logic_data(plans.apply_output({}, "Research", {"summary": "s"}), {}, 1)
    for path in conditions.output_paths("Research", {"properties": {"summary": {}}}):
        assert jsonlogic.evaluate({"var": path}, state) is not None
    assert conditions.output_paths("a.b", None) == []  # `var` would read it as a path


@pytest.mark.parametrize(
    "value", [{"var": "input.a"}, {"var": "elsewhere"}, "input.a", "text", 3, False, [1, "x"]]
)
def test_a_mapping_value_round_trips_through_its_box(value):
    paths = ["input.a", "iteration"]
    assert conditions.parse_source(conditions.show_source(value, paths), paths) == value


def test_a_mapping_box_reads_a_path_picked_and_refuses_bad_jsonlogic():
    assert conditions.parse_source("input.a", ["input.a"]) == {"var": "input.a"}
    assert conditions.parse_source("input.a", []) == "input.a"
    # An object whose key is no operator is a literal object, as the engine maps it.
    assert conditions.parse_source('{"nope": 1}', []) == {"nope": 1}
    with pytest.raises(ConditionError, match="unknown operator 'nope'"):
        conditions.parse_source('{"cat": [{"nope": 1}]}', [])
    with pytest.raises(ConditionError, match="not a value"):
        conditions.parse_source("{", [])
