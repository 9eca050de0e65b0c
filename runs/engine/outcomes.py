"""What a step comes to, as data the driver acts on.

A step function answers one of these instead of raising: the driver (core.py) records a
`Completed` step and goes on, fails the run or lets its retry policy schedule another attempt
for a `Failed` one, stops at `NeedsApproval` (the run was persisted PAUSED) and
`WaitingOnChildren` (persisted WAITING), waits BLOCKED or fails at `OverBudget`, and schedules
the run at `RetryAt`. Only `LeaseLost` (runs/engine/ports.py) stays an exception: the store
saying the run is another worker's is an abort, not a step's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.engine.limits import LimitReached


@dataclass(frozen=True)
class Completed:
    """The step produced its output."""

    output: Any


@dataclass(frozen=True)
class Failed:
    """The step failed with an error code of the seed's families. `retryable`: the retry
    policy may try it again; `retry_after_s`: a rate limit's wait (the same attempt, later)."""

    code: str
    message: str
    retryable: bool = False
    retry_after_s: float | None = None


@dataclass(frozen=True)
class NeedsApproval:
    """A person decides before the run goes on: the run is persisted PAUSED with the
    request (the store let go of the lease); the decision hands it back."""


@dataclass(frozen=True)
class WaitingOnChildren:
    """The step started child runs and the run is persisted WAITING; the last child to
    finish wakes it."""

    child_ids: tuple[str, ...]
    taken: str | None = None  # the child this worker holds the lease of (handoff)


@dataclass(frozen=True)
class OverBudget:
    """A call limit or the budget has no room for the step's next call: the run waits
    BLOCKED (`limit.blocks`) or fails."""

    limit: LimitReached


@dataclass(frozen=True)
class RetryAt:
    """The run was persisted with a due time `delay_s` from now (a retry's backoff or a
    rate limit's wait); the driver asks for it to be advanced then."""

    delay_s: float


Outcome = Completed | Failed | NeedsApproval | WaitingOnChildren | OverBudget | RetryAt
