"""Plan semantics (DESIGN.md "Plan semantics"): pure functions from a definition and a run's
state to the steps to run, the input of a child, the output of a run.

A definition is the pinned version's snapshot in the exchange format; a plan is a list of
step dicts: key, name, type, order, target_entity, tool_id, prompt_template, required,
exit_conditions, input_mapping, relationship, condition.
"""

from __future__ import annotations

import json
from typing import Any

from runs.engine import jsonlogic
from runs.engine.definition import Definition

CHILD = "CHILD_ENTITY_INVOCATION"
DELEGATE = "DELEGATE"  # hires a subordinate at run time (runs/engine/hiring.py)
STARTS_A_RUN = (CHILD, DELEGATE)  # the steps that run as child runs the run waits on


def build_static_plan(
    definition: Definition, child_names: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The plan without dynamic planning: the static plan's steps when it is enabled, else one
    step per child link in order (named after the child), else (an atomic entity) one THOUGHT
    step."""
    child_names = child_names or {}
    links = definition["hierarchy"]["children"]
    link_of: dict[str, dict[str, Any]] = {}
    for link in links:
        link_of.setdefault(link["child_id"], link)
    static = definition["planning"]["static_plan"]
    if static.get("enabled") and static.get("steps"):
        return [
            _static_step(step, link_of)
            for step in sorted(static["steps"], key=lambda s: s["order"])
        ]
    if links:
        return [
            {
                "key": f"child-{index}",
                "name": child_names.get(link["child_id"], link["child_id"]),
                "type": CHILD,
                "order": index,
                "target_entity": link["child_id"],
                "tool_id": None,
                "prompt_template": None,
                "required": True,
                "exit_conditions": [],
                "input_mapping": link.get("input_mapping") or {},
                "relationship": link.get("relationship", "SEQUENTIAL"),
                "condition": _condition(link),
            }
            for index, link in enumerate(links, start=1)
        ]
    return [
        {
            "key": "answer",
            "name": "Answer",
            "type": "THOUGHT",
            "order": 1,
            "target_entity": None,
            "tool_id": None,
            "prompt_template": None,
            "required": True,
            "exit_conditions": [],
            "input_mapping": {},
            "relationship": "SEQUENTIAL",
            "condition": None,
        }
    ]


def _static_step(step: dict[str, Any], link_of: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A step of an enabled static plan, with its child link's mapping and relationship."""
    target = step.get("target") or {}
    link = link_of.get(target.get("entity_id") or "", {})
    if step["type"] == DELEGATE:  # a hire (runs/engine/hiring.py): no link of its own
        link = {}
    planned = {
        "key": step.get("step_id") or f"step-{step['order']}",
        "name": step["name"],
        "type": step["type"],
        "order": step["order"],
        "target_entity": target.get("entity_id"),
        "tool_id": target.get("tool_id"),
        "prompt_template": target.get("prompt_template"),
        "required": step.get("required", True),
        "exit_conditions": step.get("exit_conditions", []),
        "input_mapping": step.get("input_mapping") or link.get("input_mapping") or {},
        "relationship": link.get("relationship", "SEQUENTIAL"),
        "condition": _condition(link),
    }
    if step["type"] == DELEGATE:
        planned["hire"] = dict(target.get("hire") or {})
    return planned


def _condition(link: dict[str, Any]) -> Any:
    condition = link.get("condition") or {}
    if link.get("relationship") == "CONDITIONAL" and condition.get("enabled"):
        return condition.get("expression")
    return None


def group_at(plan: list[dict[str, Any]], cursor: int) -> list[int]:
    """Indexes of the steps that run together from `cursor`: consecutive PARALLEL child
    steps form one group; any other step runs alone."""
    if cursor >= len(plan):
        return []
    first = plan[cursor]
    if first["type"] not in STARTS_A_RUN or first["relationship"] != "PARALLEL":
        return [cursor]
    group = [cursor]
    for index in range(cursor + 1, len(plan)):
        step = plan[index]
        if step["type"] in STARTS_A_RUN and step["relationship"] == "PARALLEL":
            group.append(index)
        else:
            break
    return group


def logic_data(state: dict[str, Any], run_input: dict[str, Any], iteration: int) -> dict[str, Any]:
    """What JSONLogic sees: the state plus the reserved keys `input` and `iteration`."""
    return {**state, "input": run_input, "iteration": iteration}


def holds(expression: Any, data: dict[str, Any]) -> bool:
    if expression is None:
        return True
    return bool(jsonlogic.evaluate(jsonlogic.parse(expression), data))


def apply_output(
    state: dict[str, Any], step_name: str, output: Any, only: list[str] | None = None
) -> dict[str, Any]:
    """A step's output lands under its name and, when an object, its keys at the top level;
    with `only` (a child's `state_contract.writes_to`), just those keys at the top level."""
    new_state = dict(state)
    new_state[step_name] = output
    if isinstance(output, dict):
        if only is None:
            new_state.update(output)
        else:
            new_state.update({key: output[key] for key in only if key in output})
    return new_state


# Keys of the data JSONLogic sees that are not state: the iteration, and the run input as a
# whole (`input.x` reads the input's `x`, which the state holds too: it starts as the input).
_NOT_STATE = frozenset({"iteration"})


def state_keys_read(expression: Any) -> set[str] | None:
    """The state keys a JSONLogic expression (or a mapping's structure of them) reads: the
    first part of each `var` path (`input.x` reads `x`), and the names `missing` and
    `missing_some` check. None when it may read keys it does not name (a computed `var`,
    or `{"var": ""}`, the whole data)."""
    found: set[str] = set()
    stack = [expression]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        for operator, argument in item.items():
            if operator == "var":
                path = argument[0] if isinstance(argument, list) and argument else argument
                if isinstance(path, int | float) and not isinstance(path, bool):
                    path = str(path)
                if not isinstance(path, str) or not path:
                    return None
                parts = path.split(".")
                key = parts[1] if parts[0] == "input" and len(parts) > 1 else parts[0]
                if key not in _NOT_STATE:
                    found.add(key)
            elif operator in ("missing", "missing_some"):
                names = argument[1] if operator == "missing_some" else argument
                names = names if isinstance(names, list) else [names]
                if not all(isinstance(name, str) for name in names):
                    return None
                found.update(name.split(".")[0] for name in names)
            else:
                stack.append(argument)
    return found


def map_input(
    mapping: dict[str, Any],
    target_schema: dict[str, Any],
    data: dict[str, Any],
    readable: list[str] | None = None,
) -> dict[str, Any]:
    """A child's input (or a tool's arguments): the mapping's JSONLogic expressions evaluated
    against `data`, else the target schema's property names taken from `data` (with
    `readable`, a child's `state_contract.reads_from`, only those it declares)."""
    if mapping:
        return {key: mapped_value(expr, data) for key, expr in mapping.items()}
    properties = (target_schema or {}).get("properties") or {}
    if readable is not None:
        properties = [name for name in properties if name in readable]
    return {name: data[name] for name in properties if name in data}


def undeclared_reads(mapping: dict[str, Any], readable: list[str]) -> list[str] | None:
    """The state keys a child's input mapping reads that its `reads_from` does not declare
    (sorted); None when the mapping may read keys it does not name."""
    keys = state_keys_read(list(mapping.values()))
    if keys is None:
        return None
    return sorted(keys - set(readable))


def mapped_value(expression: Any, data: dict[str, Any]) -> Any:
    """One value of a mapping: a JSONLogic operation (an object with one operator key) is
    evaluated; any other object or list is built from its mapped values, so operations
    nested in it are evaluated too ({"data": {"message": {"var": "message"}}}); anything
    else is a literal ("leads", 3, true)."""
    if isinstance(expression, dict):
        if len(expression) == 1 and next(iter(expression)) in jsonlogic.OPERATORS:
            return jsonlogic.evaluate(expression, data)
        return {key: mapped_value(value, data) for key, value in expression.items()}
    if isinstance(expression, list):
        return [mapped_value(item, data) for item in expression]
    return expression


def next_index(
    plan: list[dict[str, Any]], step: dict[str, Any], data: dict[str, Any]
) -> int | str | None:
    """Where to go after `step` by its exit conditions: a plan index, "END", "ESCALATE", or
    None to go on to the next step."""
    for exit_condition in step.get("exit_conditions") or []:
        if holds(exit_condition["condition"], data):
            target: int | str = exit_condition["next_step"]  # an order, END or ESCALATE
            if target in ("END", "ESCALATE"):
                return target
            for index, candidate in enumerate(plan):
                if candidate.get("order") == target:
                    return index
    return None


def extract_output(state: dict[str, Any], output_schema: dict[str, Any]) -> dict[str, Any]:
    """The entity's output: each property of its output schema from the top of the state."""
    properties = (output_schema or {}).get("properties") or {}
    if not properties:
        return {k: v for k, v in state.items() if not isinstance(v, dict | list) or k == "text"}
    return {name: state[name] for name in properties if name in state}


def render_template(template: str, data: dict[str, Any]) -> str:
    """`{name}` placeholders from the state; objects are written as JSON, unknown names stay."""

    class Values(dict[str, Any]):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    values = Values(
        {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in data.items()}
    )
    try:
        return template.format_map(values)
    except (ValueError, IndexError, AttributeError):
        return template
