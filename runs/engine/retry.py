"""The retry policy of seed 000 §3.4.2: whether a failed attempt is tried again, and when.

A decision, not a loop: the engine records the failed attempt, asks `decide`, and on `Retry`
schedules the next attempt `delay_s` from now (a due time in the database, never a sleep in a
worker). Attempts count from 1: `attempt` is the number of the attempt that just failed, so a
policy with `max_retries: 3` allows attempts 1 to 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runs.engine.ports import LLM_ERROR, TIMEOUT, TOOL_FAILURE, VALIDATION_ERROR

# The error classes a retry policy may name (logic_gate.json retry_on); any other code
# (LIMIT_EXCEEDED, INVALID_INPUT, CANCELLED, …) is never retried.
ERROR_CLASSES = (TOOL_FAILURE, LLM_ERROR, VALIDATION_ERROR, TIMEOUT)

# The schema's defaults, for a policy that leaves a field out.
DEFAULT_POLICY: Mapping[str, Any] = {
    "max_retries": 3,
    "backoff_strategy": "EXPONENTIAL",
    "backoff_multiplier": 2.0,
    "retry_on": [TOOL_FAILURE, LLM_ERROR, TIMEOUT],
}

# A multiplier of 60 to the 19th power is not a wait anyone means; an hour is the ceiling.
MAX_DELAY_S = 3600.0


@dataclass(frozen=True)
class Retry:
    """Try again: attempt number `attempt`, `delay_s` seconds from now."""

    delay_s: float
    attempt: int


@dataclass(frozen=True)
class GiveUp:
    """Do not try again; `reason` says why, in a sentence for the trace."""

    reason: str


def decide(
    error_code: str,
    retryable: bool,
    attempt: int,
    policy: Mapping[str, Any] | None,
    *,
    max_delay_s: float = MAX_DELAY_S,
) -> Retry | GiveUp:
    """Whether attempt `attempt` (counted from 1), which failed with `error_code`, is retried.

    Retried only when the error is retryable (a permanent tool error or a rejected request
    never is), its class is one of ERROR_CLASSES and listed in the policy's `retry_on`, and
    retries remain. Raises ValueError for an attempt below 1 (a caller's bug, not a failure).
    """
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    settings = {**DEFAULT_POLICY, **(policy or {})}
    retry_on = list(settings["retry_on"] or [])
    if error_code not in ERROR_CLASSES:
        return GiveUp(f"{error_code or 'this error'} is never retried")
    if error_code not in retry_on:
        listed = ", ".join(retry_on) or "nothing"
        return GiveUp(f"{error_code} is not in retry_on (which lists {listed})")
    if not retryable:
        return GiveUp(f"the {error_code} is permanent; trying again would fail the same way")
    max_retries = int(settings["max_retries"])
    if attempt > max_retries:
        return GiveUp(f"{_retries(max_retries)} already made (max_retries {max_retries})")
    delay = backoff_s(
        str(settings["backoff_strategy"]), float(settings["backoff_multiplier"]), attempt
    )
    return Retry(delay_s=min(delay, max_delay_s), attempt=attempt + 1)


def backoff_s(strategy: str, multiplier: float, attempt: int) -> float:
    """The wait before the retry that follows failed attempt `attempt` (from 1).

    LINEAR: 1, 2, 3 … seconds; EXPONENTIAL: multiplier ** (attempt - 1), so 1, 2, 4, 8 with a
    multiplier of 2; NONE (or anything else): no wait.
    """
    if strategy == "LINEAR":
        return float(attempt)
    if strategy == "EXPONENTIAL":
        try:
            return float(multiplier ** (attempt - 1))
        except OverflowError:
            return float("inf")
    return 0.0


def _retries(count: int) -> str:
    return "1 retry" if count == 1 else f"{count} retries"
