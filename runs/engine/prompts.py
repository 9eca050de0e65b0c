"""Prompts: the persona, constraints and examples compiled into the context, and the four
reasoning modes as prompt strategies (seed 000 §3.2, §3.4.1)."""

from __future__ import annotations

import json
from typing import Any

REASONING = {
    "REACT": "Think step by step and act iteratively: reason, decide the next action, observe.",
    "CHAIN_OF_THOUGHT": "Work through the problem step by step before giving the answer.",
    "REFLECTION": "After answering, critique your answer and correct it if needed.",
    "TREE_OF_THOUGHTS": "Consider several approaches, compare them, and follow the best one.",
}


def system_prompt(definition: dict) -> str:
    persona = definition["identity"].get("persona") or {}
    parts = [persona.get("system_prompt") or f"You are {definition['identity']['name']}."]
    description = definition["identity"].get("description")
    if description:
        parts.append(f"Your task: {description}")
    constraints = [
        c if isinstance(c, str) else c.get("constraint", "")
        for c in persona.get("behavioral_constraints") or []
    ]
    if constraints:
        parts.append("Rules you must follow:\n" + "\n".join(f"- {c}" for c in constraints if c))
    examples = persona.get("examples") or []
    if examples:
        parts.append(
            "Examples:\n"
            + "\n".join(
                f"Situation: {e['scenario']}\nIdeal: {e['ideal_response']}" for e in examples
            )
        )
    return "\n\n".join(parts)


def messages_for(
    definition: dict, *, instruction: str, data: dict[str, Any], reasoning_mode: str
) -> tuple[dict[str, Any], ...]:
    user = instruction
    strategy = REASONING.get(reasoning_mode)
    if strategy:
        user = f"{strategy}\n\n{user}"
    context = json.dumps(data, default=str, ensure_ascii=False, sort_keys=True)
    return (
        {"role": "system", "content": system_prompt(definition)},
        {"role": "user", "content": f"{user}\n\nInput and state:\n{context}"},
    )
