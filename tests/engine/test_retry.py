"""The retry policy: which failures are tried again, how often, and after what wait."""

from __future__ import annotations

import pytest

from runs.engine.retry import MAX_DELAY_S, GiveUp, Retry, backoff_s, decide

pytestmark = pytest.mark.smoke

EVERY_CLASS = ["TOOL_FAILURE", "LLM_ERROR", "VALIDATION_ERROR", "TIMEOUT"]


def policy(**overrides: object) -> dict[str, object]:
    return {
        "max_retries": 3,
        "backoff_strategy": "EXPONENTIAL",
        "backoff_multiplier": 2.0,
        "retry_on": EVERY_CLASS,
        **overrides,
    }


@pytest.mark.parametrize("code", EVERY_CLASS)
def test_it_retries_each_error_class_named_in_retry_on(code: str) -> None:
    assert decide(code, True, 1, policy()) == Retry(delay_s=1.0, attempt=2)


def test_it_gives_up_on_a_class_missing_from_retry_on() -> None:
    decision = decide("VALIDATION_ERROR", True, 1, policy(retry_on=["TOOL_FAILURE"]))
    assert decision == GiveUp("VALIDATION_ERROR is not in retry_on (which lists TOOL_FAILURE)")


def test_an_empty_retry_on_retries_nothing() -> None:
    decision = decide("TOOL_FAILURE", True, 1, policy(retry_on=[]))
    assert decision == GiveUp("TOOL_FAILURE is not in retry_on (which lists nothing)")


@pytest.mark.parametrize("code", ["LIMIT_EXCEEDED", "INVALID_INPUT", "CANCELLED", "", "BOOM"])
def test_codes_outside_the_error_classes_are_never_retried(code: str) -> None:
    decision = decide(code, True, 1, policy(retry_on=[*EVERY_CLASS, code]))
    assert isinstance(decision, GiveUp) and "is never retried" in decision.reason


def test_a_permanent_error_is_never_retried() -> None:
    decision = decide("TOOL_FAILURE", False, 1, policy())
    assert decision == GiveUp("the TOOL_FAILURE is permanent; trying again would fail the same way")


def test_attempts_count_from_one_and_max_retries_adds_to_the_first() -> None:
    decisions = [decide("TIMEOUT", True, attempt, policy()) for attempt in (1, 2, 3, 4)]
    assert [type(d) for d in decisions] == [Retry, Retry, Retry, GiveUp]
    assert [d.attempt for d in decisions if isinstance(d, Retry)] == [2, 3, 4]
    assert decisions[-1] == GiveUp("3 retries already made (max_retries 3)")


def test_max_retries_zero_never_retries() -> None:
    assert decide("TIMEOUT", True, 1, policy(max_retries=0)) == GiveUp(
        "0 retries already made (max_retries 0)"
    )
    assert decide("TIMEOUT", True, 2, policy(max_retries=1)) == GiveUp(
        "1 retry already made (max_retries 1)"
    )


def test_linear_backoff_waits_one_two_three_seconds() -> None:
    delays = [decide("LLM_ERROR", True, a, policy(backoff_strategy="LINEAR")) for a in (1, 2, 3)]
    assert [d.delay_s for d in delays if isinstance(d, Retry)] == [1.0, 2.0, 3.0]


def test_exponential_backoff_doubles_with_multiplier_two() -> None:
    p = policy(max_retries=5)
    delays = [decide("LLM_ERROR", True, attempt, p) for attempt in (1, 2, 3, 4)]
    assert [d.delay_s for d in delays if isinstance(d, Retry)] == [1.0, 2.0, 4.0, 8.0]


def test_exponential_backoff_uses_the_multiplier() -> None:
    assert [backoff_s("EXPONENTIAL", 3.0, a) for a in (1, 2, 3)] == [1.0, 3.0, 9.0]
    assert [backoff_s("EXPONENTIAL", 1.5, a) for a in (1, 2, 3)] == [1.0, 1.5, 2.25]


def test_no_backoff_retries_at_once() -> None:
    assert decide("TIMEOUT", True, 2, policy(backoff_strategy="NONE")) == Retry(0.0, 3)
    assert backoff_s("SOMETHING_ELSE", 2.0, 5) == 0.0


def test_the_wait_never_exceeds_the_ceiling() -> None:
    huge = policy(max_retries=20, backoff_multiplier=60.0)
    assert decide("TIMEOUT", True, 19, huge) == Retry(MAX_DELAY_S, 20)
    assert decide("TIMEOUT", True, 3, policy(), max_delay_s=2.5) == Retry(2.5, 4)
    assert backoff_s("EXPONENTIAL", 60.0, 10_000) == float("inf")


def test_missing_fields_take_the_schema_defaults() -> None:
    assert decide("TOOL_FAILURE", True, 2, {}) == Retry(2.0, 3)  # EXPONENTIAL, multiplier 2
    assert decide("TOOL_FAILURE", True, 4, None) == GiveUp("3 retries already made (max_retries 3)")
    assert isinstance(decide("VALIDATION_ERROR", True, 1, {}), GiveUp)  # not retried by default


def test_an_attempt_below_one_is_a_callers_bug() -> None:
    with pytest.raises(ValueError, match="attempts count from 1"):
        decide("TIMEOUT", True, 0, policy())
