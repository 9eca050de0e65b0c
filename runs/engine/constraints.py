"""The part of `dynamic_planning.constraints` a program can check: sentences of three shapes,
naming the entity's own tools or children, are checked against the plan the model proposes;
every constraint also stays in the planning prompt.

- required: "use search", "must call the tool search", "always include writer";
- forbidden: "never use delete_all", "do not call publish", "must not invoke writer";
- order: "research before writer", "fetch must come before summarize".

A name is a tool's id, or a child's reference or name. A sentence of another shape, or
naming something the entity has not, is for the model alone (a constraint such as "use
markdown" names no tool or child). The sentences are the designer's, not the model's: they
are matched by fixed patterns of this module, whole and case-blind.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_NAME = r"[`'\"]?(?P<{}>[A-Za-z0-9_.\-]{{1,200}})[`'\"]?"
_WHAT = r"(?:the\s+)?(?:(?:tool|child|step|agent|skill|action)\s+)?"
_DO = r"(?:use|call|include|invoke|run)\s+"
_END = r"\s*\.?\s*"
_REQUIRED = re.compile(
    rf"^\s*(?:always\s+)?(?:must\s+)?{_DO}{_WHAT}{_NAME.format('name')}{_END}$", re.IGNORECASE
)
_FORBIDDEN = re.compile(
    rf"^\s*(?:never|do\s+not|don't|must\s+not|must\s+never)\s+{_DO}{_WHAT}"
    rf"{_NAME.format('name')}{_END}$",
    re.IGNORECASE,
)
_ORDER = re.compile(
    rf"^\s*{_WHAT}{_NAME.format('first')}\s+(?:(?:must|should)\s+(?:come|run|happen|go)\s+|"
    rf"comes\s+|runs\s+|goes\s+)?before\s+{_WHAT}{_NAME.format('then')}{_END}$",
    re.IGNORECASE,
)
_LONGEST = 500  # a longer sentence is prose for the model


@dataclass(frozen=True)
class Rule:
    """A constraint a program checks: `kind` is required, forbidden or order."""

    text: str
    kind: str
    names: tuple[str, ...]  # the targets named, as the plan's steps name them


def rules(
    constraints: Sequence[Any], tools: Sequence[str], children: Mapping[str, str]
) -> list[Rule]:
    """The checkable ones among `constraints`; `children` maps each child reference to its
    name. A name resolves to "tool:<id>" or "entity:<ref>"."""
    targets = {tool: f"tool:{tool}" for tool in tools}
    for ref, name in children.items():
        targets.setdefault(ref, f"entity:{ref}")
        targets.setdefault(name, f"entity:{ref}")
    folded = {key.casefold(): value for key, value in targets.items()}
    found: list[Rule] = []
    for constraint in constraints:
        text = str(constraint or "")
        if len(text) > _LONGEST:
            continue
        rule = _rule(text, folded)
        if rule is not None:
            found.append(rule)
    return found


def _rule(text: str, targets: Mapping[str, str]) -> Rule | None:
    for kind, pattern in (("forbidden", _FORBIDDEN), ("order", _ORDER), ("required", _REQUIRED)):
        matched = pattern.match(text)
        if matched is None:
            continue
        names = [value for key, value in matched.groupdict().items() if value is not None]
        # A sentence's full stop is no part of the last name ("… before writer.").
        resolved = [targets.get(name.rstrip(".").casefold()) for name in names]
        if all(resolved):
            return Rule(text.strip(), kind, tuple(r for r in resolved if r))
        return None
    return None


def broken(found: Sequence[Rule], plan: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the proposed plan breaks: a sentence for each rule it does not keep, naming it."""
    targets = [_target(step) for step in plan]
    problems: list[str] = []
    for rule in found:
        if rule.kind == "required" and rule.names[0] not in targets:
            problems.append(f'the constraint "{rule.text}" is not kept: no step does it')
        elif rule.kind == "forbidden" and rule.names[0] in targets:
            number = targets.index(rule.names[0]) + 1
            problems.append(f'the constraint "{rule.text}" is broken by step {number}')
        elif rule.kind == "order":
            first, then = rule.names
            if first in targets and then in targets and targets.index(first) > targets.index(then):
                problems.append(
                    f'the constraint "{rule.text}" is broken: step {targets.index(then) + 1} '
                    f"comes before step {targets.index(first) + 1}"
                )
            elif then in targets and first not in targets:
                problems.append(f'the constraint "{rule.text}" is not kept: nothing comes first')
    return problems


def _target(step: Mapping[str, Any]) -> str:
    if step.get("target_entity"):
        return f"entity:{step['target_entity']}"
    if step.get("tool_id"):
        return f"tool:{step['tool_id']}"
    return ""
