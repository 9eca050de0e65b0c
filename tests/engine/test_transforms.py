"""Output transformations: named transforms applied to output fields; problems as data."""

from __future__ import annotations

from typing import Any

import pytest

from runs.engine.transforms import (
    TRANSFORMS,
    apply_transformations,
    known_transforms,
    lookup,
    unknown_transforms,
)

pytestmark = pytest.mark.smoke


def apply(output: Any, *pairs: tuple[str, str]) -> tuple[Any, list[str]]:
    return apply_transformations(output, [{"field": f, "transform": t} for f, t in pairs])


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("capitalize", "mcDonald farm", "McDonald farm"),
        ("lower", "ABC", "abc"),
        ("upper", "abc", "ABC"),
        ("strip", "  padded \n", "padded"),
        ("title", "senior software engineer", "Senior Software Engineer"),
        ("collapse_whitespace", " a   b\n c ", "a b c"),
        ("slug", "Senior Engineer, Lisbon!", "senior-engineer-lisbon"),
        ("round_2", 3.14159, 3.14),
        ("round_2", "2.456", 2.46),
        ("round_0", 2.6, 3),
        ("round_1", 2.25, 2.2),
        ("to_string", 42, "42"),
        ("to_string", 30.0, "30"),
        ("to_string", 2.5, "2.5"),
        ("to_string", True, "true"),
        ("to_string", None, "null"),
        ("to_string", {"b": 1, "a": 2}, '{"a": 2, "b": 1}'),
        ("to_number", "1,234.50", 1234.5),
        ("to_number", " 42 ", 42),
        ("to_number", 7.5, 7.5),
        ("to_integer", "41.6", 42),
        ("to_boolean", "Yes", True),
        ("to_boolean", "off", False),
        ("to_boolean", 1, True),
        ("iso_date", "2025-01-15T10:00:00Z", "2025-01-15"),
        ("iso_date", "2025/01/15", "2025-01-15"),
        ("iso_date", "15 January 2025", "2025-01-15"),
        ("iso_date", "Jan 15, 2025", "2025-01-15"),
        ("iso_date", 1736935200, "2025-01-15"),
        ("iso_datetime", "2025-01-15 10:00", "2025-01-15T10:00:00"),
        ("iso_datetime", 0, "1970-01-01T00:00:00+00:00"),
        ("truncate_1000", "short", "short"),
        ("truncate_5", "abcdefgh", "abcd…"),
        ("truncate_100", "x" * 150, "x" * 99 + "…"),
    ],
)
def test_each_transform(name: str, value: Any, expected: Any) -> None:
    output, problems = apply({"field": value}, ("field", name))
    assert problems == []
    assert output["field"] == expected
    assert type(output["field"]) is type(expected)


def test_transformations_apply_in_order() -> None:
    output, problems = apply({"name": "  ada LOVELACE "}, ("name", "strip"), ("name", "title"))
    assert output == {"name": "Ada Lovelace"} and problems == []


def test_a_list_is_transformed_item_by_item() -> None:
    output, _ = apply(
        {"tags": ["a", "b"], "scores": ["1.234", 2]}, ("tags", "upper"), ("scores", "round_2")
    )
    assert output == {"tags": ["A", "B"], "scores": [1.23, 2.0]}


def test_dotted_fields_reach_into_objects_and_lists() -> None:
    output, problems = apply(
        {"video": {"title": "ad"}, "cuts": [{"label": "one"}, {"label": "two"}]},
        ("video.title", "upper"),
        ("cuts.1.label", "capitalize"),
    )
    assert output == {"video": {"title": "AD"}, "cuts": [{"label": "one"}, {"label": "Two"}]}
    assert problems == []


def test_a_key_with_a_dot_in_it_is_found_as_it_is() -> None:
    output, _ = apply({"a.b": "x", "a": {"b": "y"}}, ("a.b", "upper"))
    assert output == {"a.b": "X", "a": {"b": "y"}}


def test_a_field_the_output_does_not_have_is_left_alone() -> None:
    output, problems = apply({"a": 1}, ("missing", "upper"), ("a.b.c", "upper"), ("a", "round_2"))
    assert output == {"a": 1.0} and problems == []


def test_an_unknown_transform_is_a_problem_naming_the_known_ones() -> None:
    output, problems = apply({"a": "x"}, ("a", "shout"), ("a", "upper"))
    assert output == {"a": "X"}
    (problem,) = problems
    assert problem.startswith("a: unknown transform 'shout'; known transforms are ")
    assert "capitalize" in problem and "round_<digits>" in problem and "truncate_1000" in problem


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("upper", 42, "cannot upper the number 42; it applies to text"),
        ("capitalize", None, "cannot capitalize null"),
        ("to_number", "forty", "cannot to_number 'forty'; it is not a number"),
        ("to_number", "nan", "not a finite number"),
        ("to_number", True, "cannot to_number the boolean true"),
        ("to_boolean", "perhaps", "cannot to_boolean the text 'perhaps'"),
        ("iso_date", "someday", "cannot iso_date 'someday'; it is not a date"),
        ("iso_date", {"y": 1}, "cannot iso_date an object"),
        ("round_2", "x", "cannot to_number 'x'"),
    ],
)
def test_a_value_a_transform_cannot_take_stays_and_is_reported(
    name: str, value: Any, problem: str
) -> None:
    output, problems = apply({"f": value}, ("f", name))
    assert output == {"f": value}
    assert len(problems) == 1 and problems[0].startswith("f: ") and problem in problems[0]


def test_the_output_given_is_not_changed() -> None:
    original = {"name": "ada", "nested": {"n": "x"}}
    output, _ = apply(original, ("name", "upper"), ("nested.n", "upper"))
    assert original == {"name": "ada", "nested": {"n": "x"}}
    assert output == {"name": "ADA", "nested": {"n": "X"}}


def test_a_non_object_output_has_no_fields() -> None:
    assert apply("text", ("x", "upper")) == ("text", [])


def test_parametric_names_are_bounded() -> None:
    assert lookup("round_10") is not None and lookup("round_11") is None
    assert lookup("truncate_0") is None and lookup("truncate_9999999") is not None
    assert lookup("round_") is None and lookup("os.system") is None


def test_known_and_unknown_names_for_design_time_checks() -> None:
    assert set(TRANSFORMS) <= set(known_transforms())
    assert unknown_transforms(
        [{"field": "a", "transform": "upper"}, {"field": "b", "transform": "rot13"}]
    ) == ["rot13"]
