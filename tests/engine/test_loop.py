"""Loop control: convergence, what earlier passes the model sees, the iteration limits."""

from __future__ import annotations

from typing import Any

import pytest

from runs.engine.loop import (
    converged,
    default_summary,
    iteration_context,
    iteration_limit,
    metric_value,
    next_iteration_allowed,
    summarized,
    summary_due,
    unmet,
)

pytestmark = pytest.mark.smoke


def crit(metric: str, operator: str, threshold: float) -> dict[str, Any]:
    return {"metric": metric, "operator": operator, "threshold": threshold}


@pytest.mark.parametrize(
    ("operator", "value", "expected"),
    [
        ("GT", 0.91, True),
        ("GT", 0.9, False),
        ("GTE", 0.9, True),
        ("GTE", 0.89, False),
        ("LT", 0.89, True),
        ("LT", 0.9, False),
        ("LTE", 0.9, True),
        ("LTE", 0.91, False),
        ("EQ", 0.9, True),
        ("EQ", 0.3 * 3, True),  # 0.8999999999999999: equal within rounding
        ("EQ", 0.91, False),
    ],
)
def test_each_operator_compares_the_metric_with_the_threshold(
    operator: str, value: float, expected: bool
) -> None:
    assert converged([crit("score", operator, 0.9)], {"score": value}) is expected


def test_every_criterion_must_hold() -> None:
    criteria = [crit("score", "GTE", 0.8), crit("errors", "EQ", 0)]
    assert converged(criteria, {"score": 0.85, "errors": 0})
    assert not converged(criteria, {"score": 0.85, "errors": 2})
    assert unmet(criteria, {"score": 0.5, "errors": 2}) == [
        "score is 0.5, not GTE 0.8",
        "errors is 2, not EQ 0",
    ]


def test_no_criteria_never_converges() -> None:
    assert not converged([], {"score": 1})


def test_a_missing_or_non_numeric_metric_is_not_converged() -> None:
    assert not converged([crit("score", "GT", 0)], {})
    assert not converged([crit("score", "GT", 0)], {"score": "0.9"})
    assert not converged([crit("done", "EQ", 1)], {"done": True})
    assert unmet([crit("score", "GT", 0)], {}) == ["score is not in the state as a number"]


def test_metrics_are_read_through_dotted_paths() -> None:
    state = {"review": {"scores": [0.2, 0.95]}, "input": {"target": 3}}
    assert metric_value(state, "review.scores.1") == 0.95
    assert metric_value(state, "input.target") == 3.0
    assert metric_value(state, "review.scores.7") is None
    assert metric_value(state, "review.missing") is None
    assert converged([crit("review.scores.1", "GT", 0.9)], state)


def test_a_key_with_a_dot_in_it_is_read_as_it_is() -> None:
    assert metric_value({"quality.score": 0.7, "quality": {"score": 0.1}}, "quality.score") == 0.7


def test_an_unknown_operator_is_reported_not_raised() -> None:
    assert not converged([crit("score", "ABOUT", 1)], {"score": 1})
    assert "unknown operator 'ABOUT'" in unmet([crit("score", "ABOUT", 1)], {"score": 1})[0]


HISTORY = [{"draft": 1}, {"draft": 2}, {"draft": 3}, {"draft": 4}]


def test_full_history_shows_every_pass() -> None:
    assert iteration_context(HISTORY, "FULL_HISTORY") == HISTORY


def test_last_n_shows_the_recent_passes() -> None:
    assert iteration_context(HISTORY, "LAST_N") == HISTORY[-3:]
    assert iteration_context(HISTORY, "LAST_N", n=1) == [{"draft": 4}]
    assert iteration_context(HISTORY, "LAST_N", n=0) == []
    assert iteration_context(HISTORY[:2], "LAST_N") == HISTORY[:2]


def test_summarized_is_one_text_from_the_summarizer() -> None:
    seen: list[Any] = []

    def summarize(history: Any) -> str:
        seen.append(list(history))
        return "four drafts"

    assert iteration_context(HISTORY, "SUMMARIZED", summarize=summarize) == "four drafts"
    assert seen == [HISTORY]


def test_the_default_summary_is_a_line_per_pass_with_long_ones_cut() -> None:
    text = iteration_context([{"draft": 1}, "x" * 400], "SUMMARIZED")
    assert isinstance(text, str)
    first, second = text.split("\n")
    assert first == 'Iteration 1: {"draft": 1}'
    assert second.startswith("Iteration 2: xxx") and second.endswith("…")
    assert len(second) == len("Iteration 2: ") + 300
    assert default_summary([]) == ""


@pytest.mark.parametrize(
    ("every", "due_at"),
    [(None, [1, 2, 3, 4, 5]), (1, [1, 2, 3, 4, 5]), (2, [2, 4]), (3, [3])],
)
def test_a_summary_is_due_once_every_n_passes_gathered_since_the_last(
    every: int | None, due_at: list[int]
) -> None:
    summarised, due = 0, []
    for passes in range(1, 6):  # the passes kept before passes 2 to 6
        if summary_due(passes, summarised, every):
            summarised = passes
            due.append(passes)
    assert due == due_at


def test_summarized_shows_the_last_summary_and_the_passes_since_verbatim() -> None:
    long = "x" * 400
    assert (
        summarized([{"draft": 1}, long], None, 0)
        == f'Iteration 1: {{"draft": 1}}\nIteration 2: {long}'
    )
    assert summarized([{"draft": 1}, long], "a first draft", 1) == (
        f"Summary of iteration 1: a first draft\nIteration 2: {long}"
    )
    assert summarized(HISTORY, "three drafts", 3) == (
        'Summary of iterations 1-3: three drafts\nIteration 4: {"draft": 4}'
    )


def test_an_unknown_mode_shows_everything() -> None:
    assert iteration_context(HISTORY, "WHATEVER") == HISTORY


def test_the_iteration_limit_is_max_iterations_under_the_hard_cap() -> None:
    assert iteration_limit(3, 50) == 3
    assert iteration_limit(None, 50) == 50
    assert iteration_limit(500, 50) == 50


def test_another_pass_is_allowed_until_the_limit() -> None:
    assert next_iteration_allowed(1, 3, 50)
    assert next_iteration_allowed(2, 3, 50)
    assert not next_iteration_allowed(3, 3, 50)
    assert not next_iteration_allowed(1, 1, 50)  # the default: one pass


def test_a_loop_without_max_iterations_stops_at_the_hard_cap() -> None:
    assert next_iteration_allowed(49, None, 50)
    assert not next_iteration_allowed(50, None, 50)
