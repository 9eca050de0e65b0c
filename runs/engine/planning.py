"""Dynamic planning and plan reconciliation (seed 000 §3.5.2, §4.2; DESIGN.md "Plan
semantics").

At a run's first entry, when dynamic planning is enabled, the engine:

1. builds the static plan (`plan.build_static_plan`);
2. asks the model for a plan with `planning_request`, whose response schema (`plan_schema`)
   offers as each step's `target` only what this entity may use: "THOUGHT",
   "TOOL_CALL:<tool id>", "CHILD_ENTITY_INVOCATION:<child name>". The step type is part of
   the target, so no answer valid against the schema can pair a type with the wrong kind of
   reference (the offline model picks enum values independently);
3. reads the answer with `parse_dynamic_plan`, which resolves every reference and answers a
   `PlanRejected` naming each unknown child or tool (and each tool `can_change_tools: false`
   forbids);
4. merges it with the static plan with `reconcile_for` (the definition's settings) or
   `reconcile`, which returns the plan to run and notes explaining every accept and reject.

Steps are plan step dicts with the keys of `plan.build_static_plan`. A dynamic step matches a
static step when both invoke the same child, call the same tool, or (THOUGHT and ACTION steps)
have the same name; the n-th such dynamic step matches the n-th such static step. A matched step
runs as the static step (its key, order, mapping, exit conditions). Unmatched dynamic steps are
additions, keyed `dynamic-<n>`, optional, with orders after the static plan's (static orders
stay as designed because exit conditions jump to them).

Reconciliation, for a plan that deviates from the static one (deviations: adding steps, leaving
out optional steps, reordering static steps; leaving out a required step is never accepted):

- fallback STRICT, all or nothing: a plan with any deviation `allowed_deviations` does not
  permit, or that leaves out a required step, is rejected whole and the static plan runs
  unchanged (with the default deviations, all false, that is any deviation at all); a plan
  within bounds is merged by the strategy;
- fallback ADAPTIVE, step by step: allowed deviations are taken, the others rejected one by
  one, required steps the plan left out restored;
- fallback DYNAMIC_ONLY: the static plan is not a blueprint; the dynamic plan runs as proposed
  (additions, order, left-out optional steps), the strategy and `allowed_deviations` do not
  apply. Required static steps are still restored: DESIGN.md makes "required static steps are
  never dropped" unconditional, and a designer who wants none marks them optional.

The strategies:

- STATIC_PRIORITY: the static plan as designed, every step in static order; the dynamic plan
  only adds steps, appended after it when `can_add_steps`;
- DYNAMIC_PRIORITY: the dynamic order; additions stay where proposed when `can_add_steps`;
  static steps take the proposed order when `can_reorder_steps`, else their static order in the
  same places; optional steps left out are skipped when `can_skip_optional_steps`, else put
  back; required steps left out are put back;
- HYBRID: required static steps in static order (they never move); optional static steps are
  kept where the static plan has them, moved to the proposed position when
  `can_reorder_steps`, left out when the plan leaves them out and `can_skip_optional_steps`;
  additions are inserted at their proposed position (after the step they follow in the
  dynamic plan) when `can_add_steps`.

A step put back goes right after the nearest earlier static step in the plan (else before the
first later one). With no enabled static plan (`reconcile_for`), the plan derived from child
links is not a blueprint either: the dynamic plan runs as proposed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runs.engine import constraints, hiring
from runs.engine import plan as plans
from runs.engine.definition import Definition
from runs.engine.ports import VALIDATION_ERROR, ModelReply, ModelRequest
from runs.engine.prompts import messages_for

CHILD = plans.CHILD
DELEGATE = plans.DELEGATE
TOOL = "TOOL_CALL"
THOUGHT = "THOUGHT"
PLAN_MAX_STEPS = 25
DYNAMIC_KEY = "dynamic-"
DEFAULT_DEVIATIONS: Mapping[str, bool] = {
    "can_add_steps": False,
    "can_skip_optional_steps": False,
    "can_reorder_steps": False,
    "can_change_tools": False,
}

RequestFactory = Callable[..., ModelRequest]
Step = dict[str, Any]


@dataclass(frozen=True)
class PlanRejected:
    """A dynamic plan that cannot run: `problems` names each bad reference, in order."""

    message: str
    problems: tuple[str, ...] = ()
    code: str = VALIDATION_ERROR


# -- what the definition allows ---------------------------------------------------------------


def _section(definition: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    value: Any = definition
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def deviations(definition: Mapping[str, Any]) -> dict[str, bool]:
    """The entity's allowed_deviations with the schema's defaults (all false)."""
    given = _section(definition, "planning", "dynamic_planning", "allowed_deviations")
    return {key: bool(given.get(key, default)) for key, default in DEFAULT_DEVIATIONS.items()}


def has_static_plan(definition: Mapping[str, Any]) -> bool:
    """Whether the definition has an enabled static plan with steps (a blueprint)."""
    static = _section(definition, "planning", "static_plan")
    return bool(static.get("enabled") and static.get("steps"))


def _static_steps(definition: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if not has_static_plan(definition):
        return []
    return list(_section(definition, "planning", "static_plan")["steps"])


def _links(definition: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    links: dict[str, Mapping[str, Any]] = {}
    for link in _section(definition, "hierarchy").get("children") or []:
        links.setdefault(str(link["child_id"]), link)
    return links


def child_refs(definition: Mapping[str, Any]) -> list[str]:
    """The children a plan may invoke: the child links, then static-step targets, once each."""
    refs = list(_links(definition))
    for step in _static_steps(definition):
        ref = (step.get("target") or {}).get("entity_id")
        if ref and ref not in refs:
            refs.append(str(ref))
    return refs


def _tools(definition: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    tools = _section(definition, "capabilities").get("tools") or []
    return {str(tool["tool_id"]): tool for tool in tools if tool.get("tool_id")}


def allowed_tools(definition: Mapping[str, Any]) -> list[str]:
    """The tools a dynamic plan may call: every tool of the entity when `can_change_tools`
    (or when there is no static plan to change tools from), else only those the static plan
    calls."""
    tools = list(_tools(definition))
    if deviations(definition)["can_change_tools"] or not has_static_plan(definition):
        return tools
    used = {(s.get("target") or {}).get("tool_id") for s in _static_steps(definition)}
    return [tool_id for tool_id in tools if tool_id in used]


def target_options(
    definition: Mapping[str, Any], child_names: Mapping[str, str]
) -> dict[str, tuple[str, str | None]]:
    """Each target a plan step may name, with its step type and reference."""
    options: dict[str, tuple[str, str | None]] = {THOUGHT: (THOUGHT, None)}
    for ref in child_refs(definition):
        options[f"{CHILD}:{child_names.get(ref, ref)}"] = (CHILD, ref)
    for tool_id in allowed_tools(definition):
        options[f"{TOOL}:{tool_id}"] = (TOOL, tool_id)
    rules = hiring.delegation(definition)
    if rules["enabled"]:  # hire a subordinate of a template (runs/engine/hiring.py)
        for ref in rules["templates"]:
            options[f"{DELEGATE}:{child_names.get(ref, ref)}"] = (DELEGATE, ref)
    return options


def target_of(step: Mapping[str, Any], child_names: Mapping[str, str]) -> str:
    """A plan step's target as the plan schema writes it."""
    if step["type"] == CHILD:
        ref = str(step.get("target_entity"))
        return f"{CHILD}:{child_names.get(ref, ref)}"
    if step["type"] == TOOL:
        return f"{TOOL}:{step.get('tool_id')}"
    if step["type"] == DELEGATE:
        ref = str(step.get("target_entity"))
        return f"{DELEGATE}:{child_names.get(ref, ref)}"
    return THOUGHT


# -- asking the model -------------------------------------------------------------------------


def plan_schema(
    definition: Mapping[str, Any], child_names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON Schema of the plan the model must answer: 1 to PLAN_MAX_STEPS steps, each a
    `target` from the enum of what this entity may use, a `name` and an `instruction`."""
    options = list(target_options(definition, child_names or {}))
    properties: dict[str, Any] = {
        "target": {
            "enum": options,
            "description": "What the step runs: THOUGHT (reason with the "
            "model), TOOL_CALL:<tool id> or CHILD_ENTITY_INVOCATION:<child>"
            + (", or DELEGATE:<template> (hire a subordinate)." if _hires(definition) else "."),
        },
        "name": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "A short name; to keep a static step, its name.",
            "examples": [
                "Check the facts",
                "Clean up the input",
                "Review for compliance",
                "Summarise the findings",
                "Translate for other markets",
            ],
        },
        "instruction": {
            "type": "string",
            "maxLength": 2000,
            "description": "For a THOUGHT step, what to think about; otherwise empty.",
        },
    }
    if _hires(definition):
        properties.update(HIRE_PROPERTIES)
    return {
        "title": "dynamic_plan",
        "type": "object",
        "additionalProperties": False,
        "required": ["steps"],
        "properties": {
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": PLAN_MAX_STEPS,
                "description": "The steps in the order they should run.",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["target", "name", "instruction"],
                    "properties": properties,
                },
            }
        },
    }


# What a DELEGATE step of a dynamic plan says of its hire (runs/engine/hiring.py).
HIRE_PROPERTIES: Mapping[str, Any] = {
    "role": {
        "type": "string",
        "maxLength": hiring.ROLE_MAX,
        "description": "For a DELEGATE step, the subordinate's role.",
        "examples": ["Market researcher", "Fact checker", "Editor"],
    },
    "task": {
        "type": "string",
        "maxLength": hiring.TASK_MAX,
        "description": "For a DELEGATE step, the task given to the subordinate.",
    },
    "budget_usd": {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "description": "For a DELEGATE step, its budget, taken from this run's.",
    },
    "reason": {
        "type": "string",
        "maxLength": hiring.REASON_MAX,
        "description": "For a DELEGATE step, why the hire.",
    },
}


def _hires(definition: Mapping[str, Any]) -> bool:
    return bool(hiring.delegation(definition)["enabled"])


def planning_request(
    definition: Definition,
    *,
    child_names: Mapping[str, str],
    static: Sequence[Mapping[str, Any]],
    run_input: Mapping[str, Any],
    request_factory: RequestFactory,
    context: Mapping[str, Any] | None = None,
    feedback: str = "",
) -> ModelRequest:
    """The PLAN model request: the persona, the planning prompt, constraints, the static plan,
    what may change, the options, and the input (plus `context` and `feedback` when the engine
    re-plans after a failed review, ALTERNATIVE_PATH).

    `request_factory(messages=…, response_schema=…, purpose=…)` adds the model settings.
    """
    instruction = planning_instruction(
        definition,
        child_names=child_names,
        static=static if has_static_plan(definition) else [],
        run_input=run_input,
        feedback=feedback,
    )
    config = _section(definition, "logic_gate", "reasoning_config")
    data: dict[str, Any] = {"input": dict(run_input)}
    if context:
        data["context"] = dict(context)
    return request_factory(
        messages=messages_for(
            definition,
            instruction=instruction,
            data=data,
            reasoning_mode=str(config.get("reasoning_mode", "")),
        ),
        response_schema=plan_schema(definition, child_names),
        purpose="PLAN",
    )


def planning_instruction(
    definition: Mapping[str, Any],
    *,
    child_names: Mapping[str, str],
    static: Sequence[Mapping[str, Any]],
    run_input: Mapping[str, Any],
    feedback: str = "",
) -> str:
    """The text of the planning request (seed 000 §3.5.2's prompt, with the options)."""
    dynamic = _section(definition, "planning", "dynamic_planning")
    prompt = str(dynamic.get("planning_prompt") or "") or (
        "Plan the steps that best accomplish this entity's task for the input below."
    )
    parts = [plans.render_template(prompt, dict(run_input))]
    constraints = [str(c) for c in dynamic.get("constraints") or [] if c]
    if constraints:
        parts.append("Constraints you must respect:\n" + "\n".join(f"- {c}" for c in constraints))
    parts.append(_static_text(definition, static, child_names))
    parts.append("Targets a step may use:\n" + _options_text(definition, child_names))
    parts.append(
        'Answer with JSON: {"steps": [{"target": ..., "name": ..., "instruction": ...}]}, '
        f"the steps in the order they should run, at most {PLAN_MAX_STEPS}. To keep a step "
        "of the static plan, use its target and name."
    )
    if feedback:
        parts.append(f"The previous attempt did not pass review: {feedback}\nPlan differently.")
    return "\n\n".join(parts)


def _static_text(
    definition: Mapping[str, Any],
    static: Sequence[Mapping[str, Any]],
    child_names: Mapping[str, str],
) -> str:
    if not static:
        return "There is no static plan: plan the steps from the targets below."
    lines = [
        f"{index}. {step['name']}: {target_of(step, child_names)} "
        f"({'required' if step.get('required', True) else 'optional'})"
        for index, step in enumerate(static, start=1)
    ]
    allowed = deviations(definition)
    rules = [
        ("add steps", allowed["can_add_steps"]),
        ("leave out optional steps", allowed["can_skip_optional_steps"]),
        ("reorder steps", allowed["can_reorder_steps"]),
        ("use tools the static plan does not use", allowed["can_change_tools"]),
    ]
    may = "; ".join(f"{'may' if ok else 'may not'} {what}" for what, ok in rules)
    return (
        "The static plan, designed in advance:\n"
        + "\n".join(lines)
        + f"\nRequired steps always run. You {may}."
    )


def _options_text(definition: Mapping[str, Any], child_names: Mapping[str, str]) -> str:
    tools = _tools(definition)
    lines = []
    for option, (kind, ref) in target_options(definition, child_names).items():
        if kind == THOUGHT:
            about = "reason with the model; say what about in `instruction`"
        elif kind == TOOL:
            tool = tools.get(str(ref), {})
            about = str(
                tool.get("description")
                or (tool.get("function_schema") or {}).get("description")
                or f"call the tool {ref}"
            )
        elif kind == DELEGATE:
            about = (
                f"hire a subordinate of the template {child_names.get(str(ref), ref)}: give "
                "its `role`, its `task`, its `budget_usd` (from this run's budget) and the "
                "`reason` for the hire"
            )
        else:
            about = f"invoke the child entity {child_names.get(str(ref), ref)}"
        lines.append(f"- {option}: {about}")
    return "\n".join(lines)


# -- reading the answer -----------------------------------------------------------------------


def parse_dynamic_plan(
    reply: ModelReply,
    definition: Mapping[str, Any],
    child_names: Mapping[str, str] | None = None,
) -> list[Step] | PlanRejected:
    """The model's plan as plan step dicts, or a PlanRejected naming every problem.

    Targets resolve by the schema's values; a child may also be named by its reference. A
    target outside what `plan_schema` offers is rejected: an unknown child, an unknown tool, a
    tool of the entity that `can_change_tools: false` keeps out.
    """
    names = child_names or {}
    raw = _decoded(reply)
    if isinstance(raw, PlanRejected):
        return raw
    if not raw:
        return PlanRejected("the dynamic plan has no steps", ("the plan has no steps",))
    if len(raw) > PLAN_MAX_STEPS:
        return PlanRejected(
            f"the dynamic plan has {len(raw)} steps; at most {PLAN_MAX_STEPS} are allowed"
        )
    options = target_options(definition, names)
    links = _links(definition)
    steps: list[Step] = []
    problems: list[str] = []
    for number, item in enumerate(raw, start=1):
        resolved = _resolve(number, item, options, definition, names)
        if isinstance(resolved, str):
            problems.append(resolved)
            continue
        kind, ref = resolved
        steps.append(_new_step(number, kind, ref, item, links, names))
    if problems:
        return PlanRejected(
            "the dynamic plan was rejected: " + "; ".join(problems), tuple(problems)
        )
    broken = _broken_constraints(definition, names, steps)
    if broken:
        return PlanRejected(
            "the dynamic plan breaks its constraints: " + "; ".join(broken), tuple(broken)
        )
    return steps


def _broken_constraints(
    definition: Mapping[str, Any], names: Mapping[str, str], steps: Sequence[Step]
) -> list[str]:
    """What the proposed steps break of the constraints a program can check (required and
    forbidden tools and children, and their order: runs/engine/constraints.py)."""
    sentences = _section(definition, "planning", "dynamic_planning").get("constraints") or []
    if not sentences:
        return []
    children = {ref: names.get(ref, ref) for ref in child_refs(definition)}
    return constraints.broken(
        constraints.rules(sentences, list(_tools(definition)), children), steps
    )


def _decoded(reply: ModelReply) -> list[Any] | PlanRejected:
    data = reply.parsed
    if data is None:
        try:
            data = json.loads(reply.content)
        except (TypeError, ValueError) as exc:
            return PlanRejected(f"the model's plan is not JSON ({exc})")
    if isinstance(data, Mapping):
        data = data.get("steps")
    if not isinstance(data, list):
        return PlanRejected('the model\'s plan is not {"steps": [...]}')
    return data


def _resolve(
    number: int,
    item: Any,
    options: Mapping[str, tuple[str, str | None]],
    definition: Mapping[str, Any],
    child_names: Mapping[str, str],
) -> tuple[str, str | None] | str:
    """The step type and reference of a dynamic step's target, or the problem with it."""
    if not isinstance(item, Mapping):
        return f"step {number} is not an object"
    target = item.get("target")
    where = f"step {number} ({item.get('name') or target!r})"
    if not isinstance(target, str):
        return f"{where} has no target"
    if target in options:
        return options[target]
    kind, _, ref = target.partition(":")
    if kind == CHILD:
        if ref in child_refs(definition):
            return CHILD, ref
        known = ", ".join(child_names.get(r, r) for r in child_refs(definition)) or "none"
        return f"{where} invokes {ref!r}, which is not a child of this entity (children: {known})"
    if kind == DELEGATE:
        rules = hiring.delegation(definition)
        if not rules["enabled"]:
            return f"{where} hires {ref!r}, but this entity's capabilities.delegation is disabled"
        known = ", ".join(child_names.get(r, r) for r in rules["templates"]) or "none"
        return f"{where} hires {ref!r}, which is not one of its delegation templates ({known})"
    if kind == TOOL:
        if ref in _tools(definition):
            return (
                f"{where} calls the tool {ref!r}, which the static plan does not use; "
                "can_change_tools is false"
            )
        known = ", ".join(_tools(definition)) or "none"
        return f"{where} calls {ref!r}, which is not a tool of this entity (tools: {known})"
    return f"{where} has the target {target!r}; use one of: " + ", ".join(options)


def _new_step(
    number: int,
    kind: str,
    ref: str | None,
    item: Mapping[str, Any],
    links: Mapping[str, Mapping[str, Any]],
    child_names: Mapping[str, str],
) -> Step:
    name = " ".join(str(item.get("name") or "").split())[:200]
    instruction = str(item.get("instruction") or "").strip()
    link = links.get(str(ref), {}) if kind == CHILD else {}
    if not name:
        name = child_names.get(str(ref), str(ref)) if ref else "Thought"
    if kind == DELEGATE:
        budget = hiring.as_budget(item.get("budget_usd"))
        return hiring.delegate_step(
            f"{DYNAMIC_KEY}{number}",
            name,
            number,
            hiring.HireRequest(
                role=hiring.bounded(item.get("role"), hiring.ROLE_MAX),
                task=str(item.get("task") or instruction).strip()[: hiring.TASK_MAX],
                template=str(ref),
                budget_usd=budget if not isinstance(budget, str) else None,
                reason=hiring.bounded(item.get("reason"), hiring.REASON_MAX),
            ),
        ) | {"required": False}
    return {
        "key": f"{DYNAMIC_KEY}{number}",
        "name": name,
        "type": kind,
        "order": number,
        "target_entity": ref if kind == CHILD else None,
        "tool_id": ref if kind == TOOL else None,
        "prompt_template": (instruction or None) if kind == THOUGHT else None,
        "required": False,
        "exit_conditions": [],
        "input_mapping": dict(link.get("input_mapping") or {}),
        "relationship": str(link.get("relationship", "SEQUENTIAL")),
        "condition": _link_condition(link),
    }


def _link_condition(link: Mapping[str, Any]) -> Any:
    condition = link.get("condition") or {}
    if link.get("relationship") == "CONDITIONAL" and condition.get("enabled"):
        return condition.get("expression")
    return None


# -- reconciliation ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Item:
    """A step of the plan being merged; `static_index` is its place in the static plan."""

    step: Mapping[str, Any]
    static_index: int | None


@dataclass
class _Match:
    items: list[_Item]  # the dynamic plan, in its order, matched against the static plan
    omitted: list[int] = field(default_factory=list)  # static steps it leaves out
    reordered: bool = False

    @property
    def additions(self) -> list[_Item]:
        return [item for item in self.items if item.static_index is None]


def reconcile_for(
    definition: Mapping[str, Any],
    static: Sequence[Mapping[str, Any]],
    dynamic: Sequence[Mapping[str, Any]],
) -> tuple[list[Step], list[str]]:
    """`reconcile` with the definition's strategy, allowed_deviations and fallback_behavior.
    Without an enabled static plan, `static` (derived from child links) is not a blueprint."""
    planning = _section(definition, "planning")
    return reconcile(
        static if has_static_plan(definition) else [],
        dynamic,
        strategy=str(_section(planning, "dynamic_planning").get("reconciliation_strategy", "")),
        allowed_deviations=deviations(definition),
        fallback_behavior=str(_section(planning, "static_plan").get("fallback_behavior", "")),
    )


def reconcile(
    static: Sequence[Mapping[str, Any]],
    dynamic: Sequence[Mapping[str, Any]],
    *,
    strategy: str,
    allowed_deviations: Mapping[str, bool] | None,
    fallback_behavior: str,
) -> tuple[list[Step], list[str]]:
    """The plan to run and a note for every accept and reject (module docstring: the rules).

    An unknown strategy is STATIC_PRIORITY and an unknown fallback STRICT, the cautious ones.
    """
    allowed = {**DEFAULT_DEVIATIONS, **(allowed_deviations or {})}
    if not static:
        notes = ["there is no static plan to reconcile with: the dynamic plan runs as proposed"]
        return _finish([_Item(step, None) for step in dynamic], static), notes
    match = _match(static, dynamic)
    if not match.additions and not match.omitted and not match.reordered:
        return _finish(match.items, static), ["the dynamic plan agrees with the static plan"]
    if fallback_behavior == "DYNAMIC_ONLY":
        items, notes = _dynamic_only(static, match)
    else:
        violations = _violations(static, match, allowed)
        if fallback_behavior != "ADAPTIVE" and violations:
            head = "STRICT: the dynamic plan was rejected, the static plan runs unchanged"
            return [dict(step) for step in static], [head, *(f"rejected: {v}" for v in violations)]
        merge = _MERGES.get(strategy, _static_priority)
        items, notes = merge(static, match, allowed)
    plan = _finish(items, static)
    return plan, notes + _dangling_exits(plan)


def _identity(step: Mapping[str, Any]) -> tuple[str, str]:
    if step["type"] == CHILD:
        return CHILD, str(step.get("target_entity"))
    if step["type"] == DELEGATE:
        role = " ".join(str((step.get("hire") or {}).get("role", "")).split()).casefold()
        return DELEGATE, f"{step.get('target_entity')}:{role}"
    if step["type"] == TOOL:
        return TOOL, str(step.get("tool_id"))
    return THOUGHT, " ".join(str(step.get("name", "")).split()).casefold()


def _match(static: Sequence[Mapping[str, Any]], dynamic: Sequence[Mapping[str, Any]]) -> _Match:
    """Pair each dynamic step with the first unpaired static step of the same identity."""
    unpaired: dict[tuple[str, str], list[int]] = {}
    for index, step in enumerate(static):
        unpaired.setdefault(_identity(step), []).append(index)
    items = []
    for step in dynamic:
        indexes = unpaired.get(_identity(step))
        if indexes:
            index = indexes.pop(0)
            items.append(_Item(static[index], index))
        else:
            items.append(_Item(step, None))
    order = [item.static_index for item in items if item.static_index is not None]
    omitted = sorted(i for indexes in unpaired.values() for i in indexes)
    return _Match(items, omitted, order != sorted(order))


def _violations(
    static: Sequence[Mapping[str, Any]], match: _Match, allowed: Mapping[str, bool]
) -> list[str]:
    """Each deviation the bounds do not permit (what STRICT rejects the plan for)."""
    found = []
    if not allowed["can_add_steps"]:
        found += [f"it adds {_label(i.step)} (can_add_steps is false)" for i in match.additions]
    for index in match.omitted:
        step = static[index]
        if _required(step):
            found.append(f"it leaves out the required step {_label(step)}")
        elif not allowed["can_skip_optional_steps"]:
            found.append(
                f"it leaves out the optional step {_label(step)} (can_skip_optional_steps is false)"
            )
    if match.reordered and not allowed["can_reorder_steps"]:
        found.append(
            f"it reorders the static steps to {_order(match)} (can_reorder_steps is false)"
        )
    return found


def _static_priority(
    static: Sequence[Mapping[str, Any]], match: _Match, allowed: Mapping[str, bool]
) -> tuple[list[_Item], list[str]]:
    items = [_Item(step, index) for index, step in enumerate(static)]
    notes = []
    if match.reordered:
        notes.append(f"kept the static order (STATIC_PRIORITY); the plan proposed {_order(match)}")
    for index in match.omitted:
        step = static[index]
        why = "required steps are never dropped" if _required(step) else "STATIC_PRIORITY keeps it"
        notes.append(f"kept {_label(step)}, which the dynamic plan left out: {why}")
    for item in match.additions:
        if allowed["can_add_steps"]:
            items.append(item)
            notes.append(f"added {_label(item.step)} after the static steps (STATIC_PRIORITY)")
        else:
            notes.append(f"rejected the new step {_label(item.step)}: can_add_steps is false")
    return items, notes


def _dynamic_priority(
    static: Sequence[Mapping[str, Any]], match: _Match, allowed: Mapping[str, bool]
) -> tuple[list[_Item], list[str]]:
    items, notes = _additions_in_place(match, allowed)
    if match.reordered and allowed["can_reorder_steps"]:
        notes.append(f"reordered the static steps as the dynamic plan proposed: {_order(match)}")
    elif match.reordered:
        items = _static_order_in_place(items)
        notes.append(
            f"kept the static order: can_reorder_steps is false (the plan proposed {_order(match)})"
        )
    notes += _put_back_omitted(static, match, allowed, items)
    return items, notes


def _hybrid(
    static: Sequence[Mapping[str, Any]], match: _Match, allowed: Mapping[str, bool]
) -> tuple[list[_Item], list[str]]:
    by_index = {item.static_index: item for item in match.items if item.static_index is not None}
    floating = {
        index for index in by_index if allowed["can_reorder_steps"] and not _required(static[index])
    }
    items: list[_Item] = []
    notes: list[str] = []
    for index, step in enumerate(static):
        if index in floating:
            continue
        if index in by_index:
            items.append(by_index[index])
        elif _required(step):
            items.append(_Item(step, index))
            notes.append(_restored_note(step))
        elif allowed["can_skip_optional_steps"]:
            notes.append(f"skipped the optional step {_label(step)}, as the dynamic plan proposed")
        else:
            items.append(_Item(step, index))
            notes.append(_kept_optional_note(step))
    anchor: _Item | None = None
    for item in match.items:
        if item.static_index is not None and item.static_index not in floating:
            anchor = item
            continue
        if item.static_index is None and not allowed["can_add_steps"]:
            notes.append(f"rejected the new step {_label(item.step)}: can_add_steps is false")
            continue
        items.insert(_after(items, anchor), item)
        anchor = item
        if item.static_index is None:
            notes.append(f"added {_label(item.step)} where the dynamic plan put it")
    if match.reordered:
        notes.append(_hybrid_order_note(match, allowed))
    return items, notes


def _dynamic_only(
    static: Sequence[Mapping[str, Any]], match: _Match
) -> tuple[list[_Item], list[str]]:
    items = list(match.items)
    notes = [
        "DYNAMIC_ONLY: the dynamic plan runs as proposed; the reconciliation strategy and "
        "allowed_deviations do not apply"
    ]
    notes += [f"added {_label(item.step)}" for item in match.additions]
    for index in match.omitted:
        step = static[index]
        if _required(step):
            _insert_static(items, _Item(step, index))
            notes.append(_restored_note(step))
        else:
            notes.append(f"skipped the optional step {_label(step)}, as the dynamic plan proposed")
    return items, notes


_MERGES: dict[
    str,
    Callable[
        [Sequence[Mapping[str, Any]], _Match, Mapping[str, bool]], tuple[list[_Item], list[str]]
    ],
] = {
    "STATIC_PRIORITY": _static_priority,
    "DYNAMIC_PRIORITY": _dynamic_priority,
    "HYBRID": _hybrid,
}


def _additions_in_place(
    match: _Match, allowed: Mapping[str, bool]
) -> tuple[list[_Item], list[str]]:
    items, notes = [], []
    for item in match.items:
        if item.static_index is None and not allowed["can_add_steps"]:
            notes.append(f"rejected the new step {_label(item.step)}: can_add_steps is false")
            continue
        items.append(item)
        if item.static_index is None:
            notes.append(f"added {_label(item.step)} where the dynamic plan put it")
    return items, notes


def _static_order_in_place(items: list[_Item]) -> list[_Item]:
    """The same list with the static steps back in static order in the slots they hold."""
    statics = iter(sorted((i for i in items if i.static_index is not None), key=_static_key))
    return [next(statics) if item.static_index is not None else item for item in items]


def _put_back_omitted(
    static: Sequence[Mapping[str, Any]],
    match: _Match,
    allowed: Mapping[str, bool],
    items: list[_Item],
) -> list[str]:
    notes = []
    for index in match.omitted:
        step = static[index]
        if not _required(step) and allowed["can_skip_optional_steps"]:
            notes.append(f"skipped the optional step {_label(step)}, as the dynamic plan proposed")
            continue
        _insert_static(items, _Item(step, index))
        notes.append(_restored_note(step) if _required(step) else _kept_optional_note(step))
    return notes


def _insert_static(items: list[_Item], item: _Item) -> None:
    """Put a static step back: right after the nearest earlier static step in the plan, else
    before the first later one, else at the end."""
    index = _static_key(item)
    earlier = [
        (k, i) for k, i in enumerate(items) if i.static_index is not None and _static_key(i) < index
    ]
    if earlier:
        position = max(earlier, key=lambda pair: _static_key(pair[1]))[0] + 1
    else:
        later = [k for k, i in enumerate(items) if i.static_index is not None]
        position = later[0] if later else len(items)
    items.insert(position, item)


def _after(items: list[_Item], anchor: _Item | None) -> int:
    if anchor is None:
        return 0
    return next(k for k, item in enumerate(items) if item is anchor) + 1


def _finish(items: Sequence[_Item], static: Sequence[Mapping[str, Any]]) -> list[Step]:
    """Copies of the steps; additions get orders after the static plan's and names and keys
    no other step has (a step's output lands in the state under its name)."""
    top = max((int(step.get("order") or 0) for step in static), default=0)
    names = {str(step["name"]) for step in static}
    keys = {str(step["key"]) for step in static}
    plan = []
    for item in items:
        step = dict(item.step)
        if item.static_index is None:
            top += 1
            step["order"] = top
            step["name"] = _unique(str(step["name"]), names)
            step["key"] = _unique(str(step["key"]), keys)
            names.add(step["name"])
            keys.add(step["key"])
        plan.append(step)
    return plan


def _unique(value: str, taken: set[str]) -> str:
    candidate, number = value, 2
    while candidate in taken:
        candidate = f"{value} ({number})"
        number += 1
    return candidate


def _dangling_exits(plan: Sequence[Mapping[str, Any]]) -> list[str]:
    orders = {step.get("order") for step in plan}
    notes = []
    for step in plan:
        for exit_condition in step.get("exit_conditions") or []:
            target = exit_condition.get("next_step")
            if isinstance(target, int) and target not in orders:
                notes.append(
                    f"{_label(step)} has an exit condition jumping to step {target}, which the "
                    "reconciled plan does not have; when it holds, the run goes on to the next step"
                )
    return notes


def _required(step: Mapping[str, Any]) -> bool:
    return bool(step.get("required", True))


def _static_key(item: _Item) -> int:
    return item.static_index if item.static_index is not None else -1


def _label(step: Mapping[str, Any]) -> str:
    return f"{str(step.get('name'))!r} ({target_of(step, {})})"


def _order(match: _Match) -> str:
    return ", ".join(repr(str(i.step["name"])) for i in match.items if i.static_index is not None)


def _restored_note(step: Mapping[str, Any]) -> str:
    return (
        f"restored the required step {_label(step)}, which the dynamic plan left out: "
        "required steps are never dropped"
    )


def _kept_optional_note(step: Mapping[str, Any]) -> str:
    return (
        f"kept the optional step {_label(step)}, which the dynamic plan left out: "
        "can_skip_optional_steps is false"
    )


def _hybrid_order_note(match: _Match, allowed: Mapping[str, bool]) -> str:
    if allowed["can_reorder_steps"]:
        return (
            "HYBRID: required steps keep the static order; optional and new steps go where the "
            f"dynamic plan put them (it proposed {_order(match)})"
        )
    return f"kept the static order: can_reorder_steps is false (the plan proposed {_order(match)})"
