"""Human in the loop, the engine's side (seed 000 §3.7.3, seed 002 §3): which checkpoint
applies, what the person is asked (the explanation packet), what an edit may be.

Plain Python like the rest of the engine: the store records an `ApprovalAsk` and answers an
`ApprovalVerdict`; a run that now waits on a person is a `NeedsApproval` outcome
(runs/engine/outcomes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from runs.engine import plan as plans
from runs.engine.definition import Definition
from runs.engine.state import Event, EventKind

# The decisions a person can take, and what the engine does with each.
APPROVE, EDIT, REJECT, LOCK = "approve", "edit", "reject", "lock_constraint"
ALL_DECISIONS = (APPROVE, EDIT, REJECT, LOCK)
# Outcomes of a timeout: PROCEED goes on without a decision, ABORT (or a timeout after
# escalating) ends the run.
PROCEED, ABORT = "proceed", "abort"

AWAITING_KEY = "_awaiting_decision"  # run state: the request a run resumes from
REPLAY_KEY = "_replays_after_decision"  # run state: look for recorded calls when resuming
LOCKED_KEY = "_locked_constraints"  # run state: constraints a person locked (seed 002 §3.3)
CARRIED_KEYS = (LOCKED_KEY,)  # what a child run inherits from its parent's state

REVERSIBILITY = {"READ": "full", "WRITE": "partial", "EXECUTE": "none"}
RISK_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
SUMMARY_MAX = 500
PLAN_MAX_STEPS = 50


@dataclass(frozen=True)
class ApprovalAsk:
    """One request for a person's decision, as the store records it."""

    key: str  # unique in the run: trigger, step, iteration, attempt
    trigger: str
    step_name: str
    subject: str  # input | plan | tool_arguments | output | state | failure
    payload: Any
    edit_schema: dict[str, Any] | None
    allowed_decisions: tuple[str, ...]
    approval_required: bool
    channels: tuple[str, ...]
    timeout_ms: int | None
    timeout_action: str
    resume_status: str  # the run's status once decided
    requested_by: str
    reasoning_summary: str
    confidence: dict[str, Any]
    risk: tuple[tuple[str, str], ...]  # (level, factor); the store adds cost and sets the level
    alternatives: tuple[dict[str, Any], ...]
    steps_done: int  # for the cost and time to finish, with what the store knows
    steps_left: int
    downstream_impact: dict[str, Any]
    context_snapshot: dict[str, Any]
    judge: dict[str, Any] | None = None


@dataclass(frozen=True)
class ApprovalVerdict:
    """What became of a request: `outcome` is approve, edit, reject, lock_constraint,
    proceed or abort (a timeout), or "" while it is still open."""

    status: str
    outcome: str
    payload: Any = None  # what to go on with (the original, or the edit)
    notes: str = ""
    constraint: dict[str, Any] | None = None
    decided_by: str = ""


@dataclass(frozen=True)
class RunHistory:
    """What earlier runs of the same entity say, for the cost and time estimates."""

    completed: int = 0
    mean_cost_usd: Decimal | None = None
    mean_ms: float | None = None


@dataclass
class Checkpoint:
    """A configured checkpoint (governance.human_oversight.hitl_checkpoints[i]) or the
    defaults of a place that always asks (an ESCALATE exit, an action restriction…)."""

    trigger: str
    approval_required: bool = True
    channels: tuple[str, ...] = ("IN_APP",)
    timeout_ms: int | None = None
    timeout_action: str = "ABORT"
    reasons: list[str] = field(default_factory=list)


def configured(definition: Definition, trigger: str, data: dict[str, Any]) -> Checkpoint | None:
    """The entity's checkpoint for `trigger` whose condition holds against `data`; one that
    requires approval wins over a notification-only one."""
    found: Checkpoint | None = None
    oversight = definition["governance"]["human_oversight"]
    for config in oversight.get("hitl_checkpoints") or []:
        if config.get("trigger") != trigger:
            continue
        condition = config.get("condition")
        if trigger == "CUSTOM_CONDITION" and condition is None:
            continue  # validation refuses this; never ask on every step by accident
        if condition is not None and not plans.holds(condition, data):
            continue
        checkpoint = Checkpoint(
            trigger=trigger,
            approval_required=config.get("approval_required", True),
            channels=tuple(config.get("notification_channels") or ("IN_APP",)),
            timeout_ms=config.get("timeout_ms"),
            timeout_action=config.get("timeout_action", "ABORT"),
        )
        if checkpoint.approval_required:
            return checkpoint
        found = found or checkpoint
    return found


def custom_checkpoints(definition: Definition) -> list[tuple[int, dict[str, Any]]]:
    oversight = definition["governance"]["human_oversight"]
    return [
        (index, config)
        for index, config in enumerate(oversight.get("hitl_checkpoints") or [])
        if config.get("trigger") == "CUSTOM_CONDITION" and config.get("condition") is not None
    ]


def default_checkpoint(definition: Definition, trigger: str, reason: str) -> Checkpoint:
    """A place that always asks a person: it notifies over the channels, and waits as long
    as the timeout of, the entity's first configured checkpoint that requires approval,
    else in the inbox with no timeout."""
    oversight = definition["governance"]["human_oversight"]
    for config in oversight.get("hitl_checkpoints") or []:
        if config.get("approval_required", True):
            return Checkpoint(
                trigger=trigger,
                channels=tuple(config.get("notification_channels") or ("IN_APP",)),
                timeout_ms=config.get("timeout_ms"),
                timeout_action=config.get("timeout_action", "ABORT"),
                reasons=[reason],
            )
    return Checkpoint(trigger=trigger, reasons=[reason])


def locked_rules(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state.get(LOCKED_KEY) or [])


def forbidden_by_lock(state: dict[str, Any], tool_id: str, facts: dict[str, Any]) -> str | None:
    """The locked constraint a tool call breaks, or None."""
    for constraint in locked_rules(state):
        if tool_id in (constraint.get("forbid_tools") or []):
            return str(constraint["constraint"])
        rule = constraint.get("rule")
        if rule is not None and not plans.holds(rule, facts):
            return str(constraint["constraint"])
    return None


def with_locked(definition: Definition, state: dict[str, Any]) -> Definition:
    """The definition with the locked constraints added to the persona's rules, so the
    model is told of them; the pinned definition itself is shared and never changed."""
    locked = locked_rules(state)
    if not locked:
        return definition
    identity = definition["identity"]
    persona = identity.get("persona") or {}
    rules = [*(persona.get("behavioral_constraints") or []), *locked]
    return {
        **definition,
        "identity": {**identity, "persona": {**persona, "behavioral_constraints": rules}},
    }


# -- the explanation packet (seed 002 §3.2) --------------------------------------------------


def risk_of(factors: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """The level (the highest factor's; two high ones make it critical) and the factors."""
    if not factors:
        return "low", []
    levels = [RISK_RANK[level] for level, _ in factors]
    top = max(levels)
    if top == RISK_RANK["high"] and levels.count(top) >= 2:
        top = RISK_RANK["critical"]
    level = next(name for name, rank in RISK_RANK.items() if rank == top)
    return level, [text for _, text in factors]


def reversibility(tools: list[dict[str, Any]]) -> str:
    """The least reversible of the tools a step may call: READ full, WRITE partial, EXECUTE
    none; a tool marked with side effects is at best partial."""
    worst = "full"
    order = {"full": 0, "partial": 1, "none": 2}
    for tool in tools:
        level = REVERSIBILITY.get(tool.get("permissions") or "READ", "partial")
        if tool.get("side_effects") and level == "full":
            level = "partial"
        if order[level] > order[worst]:
            worst = level
    return worst


def summary(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


def clipped(value: Any, limit: int = 20_000) -> Any:
    """A JSON value for a snapshot: kept whole when small, else a note of its size."""
    import json

    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"_clipped": f"{len(text):,} characters; see the run's state in the trace"}


# -- plan edits ------------------------------------------------------------------------------


def plan_rules(definition: Definition, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """What an edited plan must respect: known children and tools, and the required steps."""
    return {
        "children": sorted({link["child_id"] for link in definition["hierarchy"]["children"]}),
        "tools": sorted({t["tool_id"] for t in definition["capabilities"]["tools"]}),
        "required": [step["key"] for step in plan if step.get("required")],
        # The delegation templates a DELEGATE step may hire from (runs/engine/hiring.py);
        # the hire's own limits are checked when it is made.
        "templates": _templates(definition),
    }


def _templates(definition: Definition) -> list[str]:
    delegation: Any = definition["capabilities"].get("delegation") or {}
    if not delegation.get("enabled"):
        return []
    return sorted(str(ref) for ref in delegation.get("templates") or [])


def edited_plan_problems(payload: Any, rules: dict[str, Any] | None) -> dict[str, str]:
    """What is wrong with a plan a person edited, by field path (`payload.2.tool_id`)."""
    rules = rules or {}
    if not isinstance(payload, list) or not payload:
        return {"payload": "a plan is a non-empty list of steps"}
    if len(payload) > PLAN_MAX_STEPS:
        return {"payload": f"at most {PLAN_MAX_STEPS} steps"}
    problems: dict[str, str] = {}
    keys: set[str] = set()
    types: tuple[str, ...] = (plans.CHILD, "THOUGHT", "TOOL_CALL")
    if rules.get("templates"):
        types = (*types, plans.DELEGATE)
    for index, step in enumerate(payload):
        where = f"payload.{index}"
        if not isinstance(step, dict):
            problems[where] = "each step is an object"
            continue
        if not isinstance(step.get("name"), str) or not step["name"].strip():
            problems[f"{where}.name"] = "each step needs a name"
        kind = step.get("type")
        if kind not in types:
            problems[f"{where}.type"] = "one of " + ", ".join(types)
        elif kind == plans.CHILD and step.get("target_entity") not in rules.get("children", []):
            problems[f"{where}.target_entity"] = (
                f"{step.get('target_entity')!r} is not a child of this entity"
            )
        elif kind == plans.DELEGATE and not (
            step.get("target_entity") and isinstance(step.get("hire"), dict)
        ):
            # Which template, and within which limits, is checked when the hire is made.
            problems[f"{where}.hire"] = "a DELEGATE step names its template and its hire"
        elif kind == "TOOL_CALL" and step.get("tool_id") not in rules.get("tools", []):
            problems[f"{where}.tool_id"] = f"{step.get('tool_id')!r} is not a tool of this entity"
        key = step.get("key")
        if key is not None:
            if not isinstance(key, str) or not key:
                problems[f"{where}.key"] = "a step key is a non-empty string"
            elif key in keys:
                problems[f"{where}.key"] = f"the key {key!r} is used twice"
            keys.add(str(key))
        for name in ("input_mapping",):
            if step.get(name) is not None and not isinstance(step[name], dict):
                problems[f"{where}.{name}"] = "an object"
        if step.get("exit_conditions") is not None and not isinstance(
            step["exit_conditions"], list
        ):
            problems[f"{where}.exit_conditions"] = "a list"
    missing = [key for key in rules.get("required", []) if key not in keys]
    if missing and not problems:
        problems["payload"] = "required steps cannot be dropped: " + ", ".join(missing)
    return problems


def normalized_plan(payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An edited plan with every field the engine reads; new steps get keys."""
    steps = []
    for index, step in enumerate(payload, start=1):
        steps.append(
            {
                "key": step.get("key") or f"edited-{index}",
                "name": step["name"],
                "type": step["type"],
                "order": index,
                "target_entity": step.get("target_entity"),
                "tool_id": step.get("tool_id"),
                "prompt_template": step.get("prompt_template"),
                "required": bool(step.get("required", False)),
                "exit_conditions": step.get("exit_conditions") or [],
                "input_mapping": step.get("input_mapping") or {},
                "relationship": step.get("relationship") or "SEQUENTIAL",
                "condition": step.get("condition"),
                # A DELEGATE step's hire (runs/engine/hiring.py).
                **({"hire": dict(step["hire"])} if isinstance(step.get("hire"), dict) else {}),
            }
        )
    return steps


def outcome_of(status: str, decision: str, timeout_action: str, escalated: bool) -> str:
    """What the engine does with a request in this state: a decision, proceed or abort (a
    timeout, or a request closed with its run), or "" while it is open."""
    if status == "APPROVED":
        return decision or APPROVE
    if status == "REJECTED":
        return REJECT
    if status == "TIMEOUT":
        return PROCEED if timeout_action == "PROCEED" and not escalated else ABORT
    if status == "CANCELLED":
        return ABORT
    return ""


def cost_estimate(
    *,
    spent_usd: Decimal,
    tokens: int,
    llm_calls: int,
    tool_calls: int,
    budget_usd: Decimal | None,
    steps_done: int,
    steps_left: int,
    history: RunHistory,
    elapsed_ms: float,
) -> tuple[dict[str, Any], list[tuple[str, str]], str | None]:
    """Seed 002's cost estimate: what the run has spent, and what it will likely spend to
    finish (the entity's completed runs' mean less what is spent, else the cost per step so
    far times the steps left); a risk factor when the budget is nearly used; the time to
    complete from the completed runs' mean duration."""
    if history.completed and history.mean_cost_usd is not None:
        to_finish = max(history.mean_cost_usd - spent_usd, Decimal(0))
        basis = f"mean of {history.completed} completed runs"
    elif steps_done:
        to_finish = spent_usd / steps_done * steps_left
        basis = "cost per step so far"
    else:
        to_finish = None
        basis = "no completed runs or steps yet"
    estimate = {
        "cost_so_far_usd": str(spent_usd.normalize()),
        "tokens_consumed": tokens,
        "api_calls": llm_calls + tool_calls,
        "estimated_to_finish_usd": None
        if to_finish is None
        else str(to_finish.quantize(Decimal("0.000001")).normalize()),
        "estimated_total_usd": None
        if to_finish is None
        else str((spent_usd + to_finish).quantize(Decimal("0.000001")).normalize()),
        "budget_usd": None if budget_usd is None else str(budget_usd.normalize()),
        "basis": basis,
    }
    risk: list[tuple[str, str]] = []
    if budget_usd:
        used = spent_usd / budget_usd
        if used >= Decimal("0.8"):
            risk.append(("high", f"{used:.0%} of the run's budget is spent"))
        elif to_finish is not None and spent_usd + to_finish > budget_usd:
            risk.append(("medium", "finishing will likely pass the run's budget"))
    time_left = None
    if history.mean_ms is not None:
        seconds = max(history.mean_ms - elapsed_ms, 0) / 1000
        time_left = f"about {seconds:.0f} s (mean of {history.completed} completed runs)"
    return estimate, risk, time_left


@dataclass(frozen=True)
class RunFacts:
    """What a store knows of a run when it records its request for a person: its counters,
    what earlier runs of its entity say, and how long it has run."""

    spent_usd: Decimal
    tokens: int
    llm_calls: int
    tool_calls: int
    budget_usd: Decimal | None
    history: RunHistory
    elapsed_ms: float


@dataclass(frozen=True)
class Priced:
    """A request's risk level and factors, cost estimate and time to complete."""

    level: str
    factors: list[str]
    estimate: dict[str, Any]
    time_left: str | None


def priced(ask: ApprovalAsk, facts: RunFacts) -> Priced:
    """The risk and cost of a request, the same whichever store records it."""
    estimate, cost_risk, time_left = cost_estimate(
        spent_usd=facts.spent_usd,
        tokens=facts.tokens,
        llm_calls=facts.llm_calls,
        tool_calls=facts.tool_calls,
        budget_usd=facts.budget_usd,
        steps_done=ask.steps_done,
        steps_left=ask.steps_left,
        history=facts.history,
        elapsed_ms=facts.elapsed_ms,
    )
    level, factors = risk_of([*ask.risk, *cost_risk])
    return Priced(level, factors, estimate, time_left)


def readable(ask: ApprovalAsk) -> dict[str, Any]:
    """What a person reads of a request, and may edit and send back: the parts the stores
    seal under pii_handling."""
    return {
        "subject": ask.subject,
        "payload": ask.payload,
        "context_snapshot": ask.context_snapshot,
        "reasoning_summary": ask.reasoning_summary,
        "alternatives": list(ask.alternatives),
    }


def approval_event(ask: ApprovalAsk, level: str, summary: str) -> Event:
    """The trace's event for a request: `approval.requested` when it waits on a person,
    `approval.noted` when it only tells them. `summary`: the reasoning summary as the trace
    keeps it (under pii_handling)."""
    kind: EventKind = "approval.requested" if ask.approval_required else "approval.noted"
    return kind, {"trigger": ask.trigger, "step": ask.step_name, "risk": level, "summary": summary}
