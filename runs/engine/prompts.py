"""Prompts: the persona, constraints and examples compiled into the context, and the four
reasoning modes as prompt strategies (seed 000 §3.2, §3.4.1)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from runs.engine import context as ctx
from runs.engine import hiring, pinned
from runs.engine import memory as memories
from runs.engine.definition import Definition, Identity

if TYPE_CHECKING:
    from runs.engine.context import ContextPart

REASONING = {
    "REACT": "Think step by step and act iteratively: reason, decide the next action, observe.",
    "CHAIN_OF_THOUGHT": "Work through the problem step by step before giving the answer.",
    "REFLECTION": "After answering, critique your answer and correct it if needed.",
    "TREE_OF_THOUGHTS": "Consider several approaches, compare them, and follow the best one.",
}


def system_prompt(definition: Definition) -> str:
    """The persona, task, rules and examples of the definition's identity section, composed
    once per (pinned) identity section."""
    identity = definition["identity"]
    return pinned.derived(identity, "system_prompt", lambda: _system_prompt(identity))


def _system_prompt(identity: Identity) -> str:
    persona = identity.get("persona") or {}
    parts = [persona.get("system_prompt") or f"You are {identity['name']}."]
    description = identity.get("description")
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


def hired_prompt(state: dict[str, Any]) -> str:
    """A hired subordinate's role and task (runs/engine/hiring.py), before its persona."""
    role, task = state.get(hiring.ROLE_KEY), state.get(hiring.TASK_KEY)
    if not role and not task:
        return ""
    parts = [
        f"Your role: {role}." if role else "",
        f"Your task for this hire: {task}" if task else "",
    ]
    return "\n".join(p for p in parts if p) + "\n\n"


def messages_for(
    definition: Definition, *, instruction: str, data: dict[str, Any], reasoning_mode: str
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


def compose(
    definition: Definition,
    *,
    instruction: str,
    run_input: dict[str, Any],
    state: dict[str, Any],
    plan: list[dict[str, Any]] | None,
    memory: list[Any],
    iterations: Any,
    count_tokens: Any,
    artifact_store: Any = None,
    summarize: Any = None,
) -> tuple[tuple[dict[str, Any], ...], list[str]]:
    """The messages of a model call under the entity's context engineering (seed 000 §3.6.3):
    the parts in `context_priority` order, trimmed to `max_context_tokens`, objects over 10 KB
    passed INLINE, by REFERENCE or as a SUMMARY. Answers the messages and the parts dropped.
    """
    engineering = definition["capabilities"]["context_engineering"]
    handling = engineering["artifact_handling"]
    shown_input = ctx.with_artifacts(run_input, handling, summarize=summarize, store=artifact_store)
    own_state = {k: v for k, v in state.items() if k not in run_input and not k.startswith("_")}
    shown_state = ctx.with_artifacts(own_state, handling, summarize=summarize, store=artifact_store)
    static = definition["planning"]["static_plan"]
    parts: dict[str, str] = {
        "SYSTEM_PROMPT": hired_prompt(state) + system_prompt(definition),
        "USER_INPUT": "Input:\n" + _json(shown_input),
        "STATIC_PLAN": (
            "Plan:\n" + "\n".join(f"{i}. {s['name']}" for i, s in enumerate(plan or [], 1))
            if static.get("enabled") or plan
            else ""
        ),
        "DYNAMIC_PLAN": "",
        "MEMORY": ("Memory:\n" + memories.shown(memory)) if memory else "",
        "TOOL_RESULTS": ("Results so far:\n" + _json(shown_state)) if shown_state else "",
    }
    if iterations:
        shown = iterations if isinstance(iterations, str) else _json(iterations)
        parts["TOOL_RESULTS"] = (parts["TOOL_RESULTS"] + "\n\nEarlier passes:\n" + shown).strip()
    kept, dropped = _fitted(parts, engineering, instruction, count_tokens)
    return _as_messages(definition, kept, instruction), dropped


def _fitted(
    parts: dict[str, str], engineering: Any, instruction: str, count_tokens: Any
) -> tuple[list[ContextPart], list[str]]:
    """The parts in priority order, trimmed to max_context_tokens; and those dropped."""
    limit = engineering["max_context_tokens"]
    size = len(instruction.encode()) + sum(len(text.encode()) for text in parts.values())
    if size <= limit:
        # A token is at least one byte of UTF-8: what fits in bytes fits in tokens, and
        # counting (a tokenizer pass per part) can be skipped.
        kept = [
            ctx.ContextPart(kind, parts[kind], 0)
            for kind in ctx.ordered_kinds(parts, engineering["context_priority"])
            if parts[kind]
        ]
        return kept, []
    budget = limit - count_tokens(instruction)
    return ctx.build_context(parts, engineering["context_priority"], max(budget, 0), count_tokens)


def _as_messages(
    definition: Definition, kept: list[ContextPart], instruction: str
) -> tuple[dict[str, Any], ...]:
    """The system message and the user message: reasoning strategy, instruction, parts."""
    system = next((p.text for p in kept if p.kind == "SYSTEM_PROMPT"), "")
    rest = "\n\n".join(p.text for p in kept if p.kind != "SYSTEM_PROMPT")
    mode = definition["logic_gate"]["reasoning_config"]["reasoning_mode"]
    strategy = REASONING.get(mode)
    user = f"{strategy}\n\n{instruction}" if strategy else instruction
    if rest:
        user = f"{user}\n\n{rest}"
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user})
    return tuple(messages)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
