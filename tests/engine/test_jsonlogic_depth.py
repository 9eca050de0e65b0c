"""JSONLogic expressions are bounded in depth: refused at design time and never evaluated
into a RecursionError."""

from __future__ import annotations

import pytest

from runs.engine import jsonlogic

pytestmark = pytest.mark.smoke


def nested(levels: int) -> dict:
    expression: dict = {"var": "x"}
    for _ in range(levels):
        expression = {"!": [expression]}
    return expression


def test_an_expression_as_text_thousands_deep_is_refused_when_parsed():
    with pytest.raises(jsonlogic.ExpressionError, match="nested deeper than"):
        jsonlogic.parse("[" * 5000 + "]" * 5000)


def test_an_expression_past_the_limit_is_a_problem_and_is_not_evaluated():
    deep = nested(jsonlogic.MAX_DEPTH)
    assert jsonlogic.problems(deep) == [jsonlogic.TOO_DEEP]
    with pytest.raises(jsonlogic.ExpressionError, match="nested deeper than"):
        jsonlogic.evaluate(deep, {"x": 1})


def test_an_expression_within_the_limit_evaluates():
    assert jsonlogic.problems(nested(10)) == []
    assert jsonlogic.evaluate(nested(10), {"x": 1}) is True
