"""Hiring subordinates at run time (seed 004; issue 20, item 2).

An entity whose `capabilities.delegation` is enabled may hire: start a child run of one of
its `templates` with a role, a task, a budget and a reason. A hire is a `DELEGATE` plan step
(static or dynamic: `hire` holds its role, task, budget_usd and reason, `target_entity` its
template) and runs as a child step does (runs/engine/children.py): the hirer waits WAITING
without holding a worker, the subordinate's output is the step's result, a failed (or fired)
subordinate fails the step as a failed child does (the ON_FAILURE checkpoint, else the run
fails).

What the subordinate is given:

- its role, prepended to its system prompt ("Your role: ..."), and its task ("Your task for
  this hire: ..."), through two reserved keys of its state (`ROLE_KEY`, `TASK_KEY`: reserved
  keys are never shown as state; runs/engine/prompts.py reads them);
- its input: `{"task": <task>}` when its input schema has a `task` property, else `{}` (the
  task is in its prompt either way);
- its budget: the hire's `budget_usd` (no more than its entity's own max_cost_usd), else
  `max_budget_usd_each` when the delegation sets one, else none of its own (it spends its
  hirer's). A budget of its own is reserved from the hirer's budget anchor in the spawn's
  commit, all of a group's or none (the store's atomic reservation: parallel hires never
  overshoot), and what it does not spend is returned when it ends (runs/store.py
  `_child_rows` / `_write_spawn`, the in-memory store's `_spawn`).

Limits, checked before anything is written (`refusal`): delegation enabled, the template one
of the delegation's templates, `max_subordinates` hires per hirer run (counted in the hirer's
state under `HIRES_KEY`; a run is advanced by one worker at a time, so the count cannot race),
`max_budget_usd_each`; then the spawn's: `max_recursion_depth` (a hire nests one level deeper,
like any child) and the hirer's budget. A refused hire fails the hirer's run with the reason
(LIMIT_EXCEEDED or VALIDATION_ERROR); one the budget has no room for blocks or fails the run
as a child that does not fit does (the entity's on_budget_exhausted).

The reasoning loop hires the same way through its built-in `delegate` tool
(runs/engine/delegating.py): the same rules, the same child request, its refusals heard by
the model instead of failing the run.

Every hire is also checked against the workspace's monthly cost quota in the spawn (a budget
of its own, when its hirer has no budget, holds its share of the quota until it ends:
runs/engine/limits.py `quota_hold`).

Firing: runs/services.py `run_fire` (an operator, the API, the console) cancels the
subordinate with its descendants (`run_cancel`) and records why; the hirer's step then fails
with `FIRED` and the reason (a loop's delegate call returns it to the model). A hirer that
ends failed or cancelled fires the hires it still has (`fired_with`: by "limit" for its time
limit or a budget, by "hirer" otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from runs.engine import plan as plans
from runs.engine.limits import BUDGET_EXHAUSTED
from runs.engine.ports import LIMIT_EXCEEDED, TIMEOUT, VALIDATION_ERROR
from runs.engine.state import ChildRequest, Hire

if TYPE_CHECKING:
    from runs.engine.state import RunView

DELEGATE = plans.DELEGATE
FIRED = "FIRED"
ROLE_KEY = "_hired_role"  # a subordinate's state: the role its hirer gave it
TASK_KEY = "_hired_task"  # a subordinate's state: the task its hirer gave it
HIRES_KEY = "_hires"  # a hirer's state: how many subordinates it has hired
DEFAULT_MAX_SUBORDINATES = 5
# What a model proposes is kept bounded (and rendered escaped wherever it is shown).
ROLE_MAX = 200
TASK_MAX = 4000
REASON_MAX = 1000


@dataclass(frozen=True)
class HireRequest:
    """One hire: the role and task given to a subordinate of `template` (an entity reference
    or name among the delegation's templates), its budget (None: the delegation's
    `max_budget_usd_each`, else none of its own) and why."""

    role: str
    task: str
    template: str
    budget_usd: Decimal | None = None
    reason: str = ""


def delegation(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition's `capabilities.delegation` with its defaults."""
    given = (definition.get("capabilities") or {}).get("delegation") or {}
    return {
        "enabled": bool(given.get("enabled", False)),
        "templates": [str(ref) for ref in given.get("templates") or []],
        "max_subordinates": int(given.get("max_subordinates") or DEFAULT_MAX_SUBORDINATES),
        "max_budget_usd_each": given.get("max_budget_usd_each"),
    }


def bounded(text: Any, limit: int) -> str:
    """A model's text as a hire keeps it: one line of whitespace collapsed, cut at `limit`."""
    return " ".join(str(text or "").split())[:limit]


def as_budget(value: Any) -> Decimal | None | str:
    """A proposed budget as a Decimal (None for none), or the problem with it."""
    if value is None or value == "":
        return None
    try:
        budget = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return f"budget_usd {value!r} is not a number"
    if not budget.is_finite():
        return f"budget_usd {value!r} is not a finite amount"
    if budget <= 0:
        return f"budget_usd {value!r} must be more than 0"
    return budget


def request_of(step: Mapping[str, Any]) -> HireRequest:
    """The hire a DELEGATE plan step makes."""
    hire = step.get("hire") or {}
    budget = as_budget(hire.get("budget_usd"))
    return HireRequest(
        role=bounded(hire.get("role"), ROLE_MAX),
        task=str(hire.get("task") or "").strip()[:TASK_MAX],
        template=str(step.get("target_entity") or ""),
        budget_usd=budget if isinstance(budget, Decimal) else None,
        reason=bounded(hire.get("reason"), REASON_MAX),
    )


def delegate_step(key: str, name: str, position: int, request: HireRequest) -> dict[str, Any]:
    """A DELEGATE plan step for `request` (a static plan's or the tool loop's)."""
    return {
        "key": key,
        "name": name,
        "type": DELEGATE,
        "order": position,
        "target_entity": request.template,
        "tool_id": None,
        "prompt_template": None,
        "required": True,
        "exit_conditions": [],
        "input_mapping": {},
        "relationship": "SEQUENTIAL",
        "condition": None,
        "hire": {
            "role": request.role,
            "task": request.task,
            "budget_usd": None if request.budget_usd is None else str(request.budget_usd),
            "reason": request.reason,
        },
    }


def template_ref(definition: Mapping[str, Any], template: str, names: Mapping[str, str]) -> str:
    """The delegation template `template` names (by reference or by entity name; `names`:
    the entity name of each reference the store resolved); "" when it is none of them."""
    named = names.get(template, template)  # a reference the store resolved: its name
    refs: list[str] = delegation(definition)["templates"]
    for ref in refs:
        if template == ref or named in (ref, names.get(ref)):
            return ref
    return ""


def refusal(
    definition: Mapping[str, Any],
    hired: int,
    requests: list[HireRequest],
    names: Mapping[str, str],
) -> tuple[str, str] | None:
    """Why these hires (after `hired` earlier ones of the run) may not be made: (code,
    message), or None."""
    rules = delegation(definition)
    who = str((definition.get("identity") or {}).get("name") or "this entity")
    if not rules["enabled"]:
        return VALIDATION_ERROR, f"{who} may not hire: its capabilities.delegation is disabled"
    cap = rules["max_budget_usd_each"]
    for request in requests:
        if not template_ref(definition, request.template, names):
            known = ", ".join(names.get(r, r) for r in rules["templates"]) or "none"
            return (
                VALIDATION_ERROR,
                f"{who} may not hire {request.template!r}: it is not one of its delegation "
                f"templates ({known})",
            )
        if not request.role or not request.task:
            return VALIDATION_ERROR, f"a hire of {request.template!r} needs a role and a task"
        if (
            cap is not None
            and request.budget_usd is not None
            and request.budget_usd > Decimal(str(cap))
        ):
            return (
                LIMIT_EXCEEDED,
                f"hiring {request.role!r} asks ${request.budget_usd.normalize()}, more than "
                f"max_budget_usd_each ${Decimal(str(cap)).normalize()}",
            )
    if hired + len(requests) > rules["max_subordinates"]:
        return (
            LIMIT_EXCEEDED,
            f"{who} has hired {hired} subordinate(s); {len(requests)} more would pass its "
            f"max_subordinates {rules['max_subordinates']}",
        )
    return None


def child_request(
    definition: Mapping[str, Any],
    request: HireRequest,
    ref: str,
    step_key: str,
    group_index: int,
    child: Mapping[str, Any],
    carried: dict[str, Any] | None,
) -> ChildRequest:
    """The child run a hire starts: its input (`{"task": ...}` when its input schema has a
    `task` property), its state (the role and task for its prompt, what it inherits) and the
    hire's record (its budget: the request's, else max_budget_usd_each)."""
    schema = ((child.get("io_contract") or {}).get("input") or {}).get("schema") or {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    child_input = (
        {"task": request.task} if isinstance(properties, Mapping) and ("task" in properties) else {}
    )
    budget = request.budget_usd
    cap = delegation(definition)["max_budget_usd_each"]
    if budget is None and cap is not None:
        budget = Decimal(str(cap))
    state = {**(carried or {}), ROLE_KEY: request.role, TASK_KEY: request.task}
    return ChildRequest(
        step_key,
        group_index,
        ref,
        child_input,
        state,
        Hire(request.role, request.task, request.reason, budget),
    )


def hired_fields(hire: Hire | None, hirer_id: str) -> dict[str, Any]:
    """A child run row's record of its hire (all None for a designed child)."""
    if hire is None:
        return {"role": None, "task": None, "hired_reason": None, "hired_by": None}
    return {
        "role": hire.role,
        "task": hire.task,
        "hired_reason": hire.reason,
        "hired_by": hirer_id,
    }


FIRED_BY_LIMIT = "limit"  # a limit of the hirer's (its time limit, its budget) fired it
FIRED_BY_HIRER = "hirer"  # its hirer ended failed or cancelled


def fired_with(run: RunView) -> tuple[str, str] | None:
    """Why the subordinates `run` hired that are still running are fired as it ends (its
    status, code and message as it ends): (reason, by), or None when it completed or hired
    nobody. The store records it on each unfinished run it hired directly (their own hires
    are only cancelled, as those of a fired run are) and cancels them."""
    if not int(run.state.get(HIRES_KEY) or 0) or run.status not in ("FAILED", "CANCELLED"):
        return None
    who = str(run.definition["identity"]["name"])
    if run.error_code == TIMEOUT:
        limits = run.definition["governance"]["execution_limits"]
        return (
            f"its hirer {who} passed its time limit (timeout_ms {limits.get('timeout_ms')}, "
            "or an ancestor's)",
            FIRED_BY_LIMIT,
        )
    if run.error_code in (LIMIT_EXCEEDED, BUDGET_EXHAUSTED):
        return f"its hirer {who} reached a limit: {run.error_message}", FIRED_BY_LIMIT
    if run.status == "CANCELLED":
        return f"its hirer {who} was cancelled", FIRED_BY_HIRER
    return f"its hirer {who} ended FAILED: {run.error_code}", FIRED_BY_HIRER
