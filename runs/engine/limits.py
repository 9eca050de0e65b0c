"""Call limits and budgets (seed 000 §3.7): what a new run may spend, and why the next call
has no room. The stores count and reserve; the rules live here once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TypedDict

from runs.engine.definition import Definition
from runs.engine.ports import LIMIT_EXCEEDED


class LimitReached(Exception):
    """A call limit or a budget has no room for the next call. `blocks`: the run waits
    (BLOCKED, recoverable by raising the limit and resuming) instead of failing."""

    def __init__(self, code: str, message: str, *, blocks: bool = False):
        super().__init__(message)
        self.code = code
        self.blocks = blocks


BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
NOTHING = Decimal(0)


@dataclass(frozen=True)
class LimitRow:
    """What a store knows of one run when a limit may be hit: its counts, limits, budget."""

    id: str
    name: str  # the run's entity
    llm_calls: int
    max_llm_calls: int | None
    tool_calls: int
    max_tool_calls: int | None
    total_cost_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal | None
    blocks: bool  # its entity's on_budget_exhausted is BLOCK


def first_limit_hit(
    rows: list[LimitRow], *, anchor: str | None, llm_calls: int, tool_calls: int, estimate: Decimal
) -> LimitReached | None:
    """Why the next call has no room: the first of `rows` (the run, then its ancestors up)
    whose call limit it would pass, or the anchor's budget; None when there is room."""
    for row in rows:
        if row.max_llm_calls is not None and row.llm_calls + llm_calls > row.max_llm_calls:
            return LimitReached(
                LIMIT_EXCEEDED,
                f"{row.name} reached max_llm_calls {row.max_llm_calls} "
                "(its own model calls and its descendants')",
            )
        if row.max_tool_calls is not None and row.tool_calls + tool_calls > row.max_tool_calls:
            return LimitReached(
                LIMIT_EXCEEDED,
                f"{row.name} reached max_tool_calls {row.max_tool_calls} "
                "(its own tool calls and its descendants')",
            )
        if (
            row.id == anchor
            and row.budget_usd is not None
            and (row.total_cost_usd + row.reserved_usd + estimate > row.budget_usd)
        ):
            return LimitReached(
                BUDGET_EXHAUSTED,
                f"budget_exhausted: {row.name} has spent ${row.total_cost_usd.normalize()} and "
                f"holds ${row.reserved_usd.normalize()} for work under way of its "
                f"${row.budget_usd.normalize()} max_cost_usd; the next model call may cost up "
                f"to ${estimate.normalize()}",
                blocks=row.blocks,
            )
    return None


def no_room_for_children(anchor: LimitRow, amount: Decimal) -> LimitReached:
    """Why the children to start do not fit in their budget anchor's budget."""
    if anchor.budget_usd is None:
        raise ValueError(f"the budget anchor {anchor.id} has no budget")
    left = anchor.budget_usd - anchor.total_cost_usd - anchor.reserved_usd
    return LimitReached(
        BUDGET_EXHAUSTED,
        f"budget_exhausted: {anchor.name} has ${left.normalize()} left of its "
        f"${anchor.budget_usd.normalize()} max_cost_usd; the children to start ask "
        f"${amount.normalize()} together",
        blocks=anchor.blocks,
    )


def lifetime_used(name: str, limit: Decimal) -> LimitReached:
    return LimitReached(
        LIMIT_EXCEEDED,
        f"{name} has used its cumulative_cost_usd of ${limit.normalize()} "
        "(what its runs cost, and hold while they run)",
    )


def budget_blocks(definition: Definition) -> bool:
    """Whether a run out of budget waits BLOCKED (else it fails)."""
    return definition["governance"]["cost_controls"].get("on_budget_exhausted", "BLOCK") == "BLOCK"


def lifetime_limit(definition: Definition) -> Decimal | None:
    """The entity's cumulative_cost_usd: what all its runs together may ever cost."""
    limit = definition["governance"]["cost_controls"].get("cumulative_cost_usd")
    return None if limit is None else Decimal(str(limit))


class RunLimits(TypedDict):
    """What `run_limits` sets on a new run."""

    max_llm_calls: int | None
    max_tool_calls: int | None
    limited: bool
    budget_usd: Decimal | None
    budget_anchor: str | None
    cost_alert_usd: Decimal | None


def run_limits(
    definition: Definition,
    run_id: str,
    parent_anchor: str | None,
    lifetime_left: Decimal | None = None,
) -> RunLimits:
    """A new run's limits from its entity's governance section (seed 000 §3.7): its call
    limits, its budget and the run it is anchored at (itself, when it has a budget; else
    its parent's anchor), and its cost alert threshold. `lifetime_left`: what the entity's
    cumulative_cost_usd leaves (the run's budget is no more than that)."""
    governance = definition["governance"]
    limits, costs = governance["execution_limits"], governance["cost_controls"]
    budget: float | Decimal | None = costs.get("max_cost_usd")
    alert = costs.get("alert_threshold_usd")
    if lifetime_left is not None:  # cumulative_cost_usd: what the entity has left, at most
        budget = lifetime_left if budget is None else min(Decimal(str(budget)), lifetime_left)
    return {
        "max_llm_calls": limits.get("max_llm_calls"),
        "max_tool_calls": limits.get("max_tool_calls"),
        "limited": limits.get("max_llm_calls") is not None
        or limits.get("max_tool_calls") is not None,
        "budget_usd": None if budget is None else Decimal(str(budget)),
        "budget_anchor": run_id if budget is not None else parent_anchor,
        "cost_alert_usd": None if alert is None else Decimal(str(alert)),
    }


def lifetime_left(limit: Decimal, *, spent: Decimal, held: Decimal) -> Decimal:
    """What an entity's cumulative_cost_usd leaves for a new run: the limit, less what its
    ended runs cost (`spent`) and what its unfinished ones may still cost (`held`: their
    budgets, or what they cost so far when they have none)."""
    return limit - spent - held


def hired_limits(limits: RunLimits, budget_usd: Decimal | None, run_id: str) -> RunLimits:
    """A hired subordinate's limits: the budget its hirer gave it (no more than its entity's
    own, when it has one), anchored at itself so that it is reserved from the hirer's."""
    if budget_usd is None:
        return limits
    own = limits["budget_usd"]
    budget = budget_usd if own is None else min(own, budget_usd)
    return {**limits, "budget_usd": budget, "budget_anchor": run_id}


# -- the workspace's monthly cost quota, checked at each hire ------------------------------
#
# A root run's start checks both of its workspace's quotas (runs/services.py
# `_within_quotas`). A hire is checked against the monthly cost quota only: it spends the
# workspace's money, but it is not a run a person started, so it does not count against
# `user_monthly_run_quota` (a person's quota counts the runs they start; their run's hires
# are bounded by its delegation's max_subordinates and by the cost quota).

# A hired subordinate's state: the part of its workspace's monthly cost quota its budget holds
# while it runs (a string of dollars), given back when it ends.
QUOTA_HELD_KEY = "_quota_held"


def quota_hold(budget_usd: Decimal | None, hirer_anchor: str | None) -> Decimal:
    """What a hire holds of its workspace's monthly cost quota while it runs: its budget
    (`budget_usd`, after `hired_limits`) when it has one and its hirer has no budget anchor;
    else nothing.

    A budget reserved from a budget anchor is inside the anchor's budget, which counted
    against the quota already when it was given (a root's at its run's start, a hire's when
    it was hired), so it is not counted twice. (The one budget above a hire that was never
    counted: a designed child's own max_cost_usd under a root with none; its hires are
    reserved from it as any other.) A hire with no budget of its own spends its hirer's: it
    holds nothing, but is still refused once the month's quota is spent."""
    if hirer_anchor is not None or budget_usd is None:
        return NOTHING
    return budget_usd


def month_start(now: datetime) -> datetime:
    """The start of `now`'s calendar month: a monthly quota counts the runs started since."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def quota_room(quota: Decimal | None, *, spent: Decimal, held: Decimal, amount: Decimal) -> bool:
    """Whether the workspace's monthly cost quota has room for hires holding `amount`:
    nothing was spent past it this month (`spent`: what the month's root runs cost), and
    `amount` fits with what hires under way hold (`held`)."""
    if quota is None:
        return True
    return spent < quota and (not amount or spent + held + amount <= quota)


def quota_refused(
    workspace: str, quota: Decimal, *, spent: Decimal, held: Decimal, amount: Decimal
) -> LimitReached:
    """Why the workspace's monthly cost quota refuses a hire (figures as a run's start
    shows them, runs/services.py `_within_quotas`)."""
    if spent >= quota:
        return LimitReached(
            LIMIT_EXCEEDED,
            f"{workspace} has spent ${spent.normalize()} of its ${quota.normalize()} monthly "
            "cost quota; no subordinate is hired until next month or a higher quota",
        )
    return LimitReached(
        LIMIT_EXCEEDED,
        f"this hire's budget of ${amount.normalize()} would take {workspace} past its "
        f"${quota.normalize()} monthly cost quota (${spent.normalize()} spent, "
        f"${held.normalize()} held by subordinates hired with budgets of their own)",
    )
