"""json_extract: JMESPath over a JSON value."""

from __future__ import annotations

import pytest

from runs.engine.ports import VALIDATION_ERROR, ToolError
from tests.tools.conftest import context_for
from tools.builtin import json_extract

pytestmark = pytest.mark.smoke

JOB = {
    "title": "Data Analyst",
    "requirements": [
        {"skill": "SQL", "years": 3},
        {"skill": "Python", "years": 2},
        {"skill": "Tableau", "years": 1},
    ],
}


def extract(expression: str, data=JOB):
    return json_extract.run({"data": data, "expression": expression}, context_for("json_extract"))


def test_it_selects_a_field():
    assert extract("title") == "Data Analyst"


def test_it_filters_and_projects_a_list():
    assert extract("requirements[?years >= `2`].skill") == ["SQL", "Python"]


def test_it_reshapes_into_an_object_whose_keys_land_in_the_run_state():
    assert extract("{title: title, skills: requirements[].skill, n: length(requirements)}") == {
        "title": "Data Analyst",
        "skills": ["SQL", "Python", "Tableau"],
        "n": 3,
    }


def test_a_missing_path_gives_null():
    assert extract("salary.max") is None


def test_it_works_on_any_json_value_not_only_objects():
    assert extract("[1]", data=[10, 20, 30]) == 20
    assert extract("@", data="text") == "text"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("requirements[", "arguments.expression: is not a valid JMESPath expression: it ends"),
        ("title]", "arguments.expression: is not a valid JMESPath expression: Unexpected token"),
        ("nosuch(title)", "arguments.expression: Unknown function: nosuch()"),
    ],
    ids=["incomplete", "stray-token", "unknown-function"],
)
def test_a_bad_expression_is_a_permanent_validation_error(expression, message):
    with pytest.raises(ToolError) as caught:
        extract(expression)
    assert caught.value.permanent
    assert caught.value.code == VALIDATION_ERROR
    assert str(caught.value).startswith(message), str(caught.value)


def test_an_expression_the_data_does_not_fit_is_a_permanent_failure():
    with pytest.raises(ToolError, match="cannot be applied to the data") as caught:
        extract("length(requirements[0].years)")
    assert caught.value.permanent


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"data": JOB}, "arguments.expression: is required"),
        ({"expression": "title"}, "arguments.data: is required"),
        ({"data": JOB, "expression": ""}, "arguments.expression: must not be empty"),
        ({"data": JOB, "expression": 5}, "arguments.expression: must be a string, not a number"),
        ({"data": JOB, "expression": "a", "path": "b"}, "arguments.path: is not a known field"),
    ],
    ids=["no-expression", "no-data", "empty-expression", "number", "unknown-argument"],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ToolError) as caught:
        json_extract.run(arguments, context_for("json_extract"))
    assert caught.value.permanent and caught.value.code == VALIDATION_ERROR
    assert message in str(caught.value)


def test_its_sandbox_is_the_real_thing_since_it_has_no_effect():
    arguments = {"data": JOB, "expression": "requirements[0].skill"}
    assert json_extract.sandbox(arguments, context_for("json_extract")) == "SQL"
