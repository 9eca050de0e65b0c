"""The reasoning loop of a REACT entity's THOUGHT step: the model is offered the entity's
tools and may call one or several per turn; each call goes through the tool runner's path
of a TOOL_CALL step (a person's approval where one is needed, the safety rails, the call
with its limits, its record), and what it returned, or why it was refused, goes back to the
model as a tool message. The loop ends when the model answers in the output schema, or a
limit stops it: max_llm_calls, max_tool_calls, the run's time limit, or the engine's turn
cap (`Engine.max_tool_turns`).

Durable as every step: each model call is recorded under the step's key and its turn's
index, each tool call under the step's key and its running index, the moment it returns. A
loop re-entered (a worker died, a person decided, a rate limit let the call through) replays
from those records: the same conversation, with no call that had returned made again.

The calls of one turn are checked first, in their order (a person asked before any of them
is made). Then they are made in that order, except that consecutive READ calls are made at the
same time where they wait on the network (`tool_steps.invoke_tools`): only the calls run on
other threads; their admission and their records stay on the engine's thread, which owns the
store's connection and buffered writes.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from runs.engine import checkpoints, delegating, endings, tool_steps
from runs.engine.outcomes import Completed, Failed, NeedsApproval, OverBudget, WaitingOnChildren
from runs.engine.ports import LIMIT_EXCEEDED, TIMEOUT, ModelReply
from runs.engine.state import RunView, StepRecord

if TYPE_CHECKING:
    from runs.engine.core import Engine
    from runs.engine.definition import Definition

REACT = "REACT"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_NAME_CHARS = 64  # the most a provider takes in a function's name
_RESULT_CHARS = 20_000  # of one tool result the model is shown


def loops(run: RunView) -> bool:
    """Whether the run's THOUGHT steps run the reasoning loop: a REACT entity with tools, or
    one that may hire (the built-in delegate tool, runs/engine/delegating.py)."""
    config = run.definition["logic_gate"]["reasoning_config"]
    return config["reasoning_mode"] == REACT and (
        any("function_schema" in tool for tool in run.definition["capabilities"]["tools"])
        or delegating.offers(run.definition)
    )


def offered(definition: Definition) -> dict[str, dict[str, Any]]:
    """The entity's tools by the function name the model sees: the function schema's name
    (else the tool id) with anything but letters, digits, `_` and `-` made `_`, cut to 64
    characters, made unique with a number where two are alike (and with the built-in
    `delegate` tool's name, where the entity may hire)."""
    named: dict[str, dict[str, Any]] = {}
    taken = {delegating.TOOL} if delegating.offers(definition) else set()
    for tool in definition["capabilities"]["tools"]:
        function = tool.get("function_schema")
        if function is None:
            continue
        base = _UNSAFE.sub("_", function.get("name") or tool["tool_id"]).strip("_") or "tool"
        name, n = base[:_NAME_CHARS], 1
        while name in named or name in taken:
            n += 1
            name = f"{base[: _NAME_CHARS - len(str(n)) - 1]}_{n}"
        named[name] = tool
    return named


def function_schemas(tools: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The tools as the model is offered them (OpenAI's function format)."""
    schemas = []
    for name, tool in tools.items():
        function = tool["function_schema"]
        schemas.append(
            {
                "name": name,
                "description": function.get("description") or tool.get("description") or "",
                "parameters": function.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return tuple(schemas)


def reasoning_loop(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    messages: tuple[dict[str, Any], ...],
    schema: dict[str, Any] | None,
) -> tuple[RunView, ModelReply | Failed | OverBudget | NeedsApproval | WaitingOnChildren, int]:
    """Turns until the model answers: the answer (a reply that calls no tool), or why the
    loop stopped (WaitingOnChildren: it hired, and the run waits on its subordinates); and
    the number of model calls made (the index of the next)."""
    from runs.engine import thoughts  # thoughts runs this loop

    tools = offered(run.definition)
    functions = function_schemas(tools)
    hiring_from = None  # the delegation's templates, where the entity may hire
    if delegating.offers(run.definition):
        hiring_from = delegating.templates(engine, run)
        functions += (delegating.function(run.definition, hiring_from),)
    conversation = list(messages)
    calls = 0  # the tool calls so far: the next one's index
    for turn in range(engine.max_tool_turns):
        if turn and endings.expired(engine, run):
            limit = run.definition["governance"]["execution_limits"]["timeout_ms"]
            return (
                run,
                Failed(
                    TIMEOUT,
                    f"the run passed its time limit (timeout_ms {limit}, or an ancestor's) "
                    f"in turn {turn + 1} of its reasoning loop",
                    retryable=False,
                ),
                turn,
            )
        request = thoughts.model_request(
            engine,
            run,
            messages=tuple(conversation),
            response_schema=schema,
            tools=functions,
            tool_choice="auto",
            purpose="THOUGHT",
        )
        run, reply = thoughts.call_model(engine, run, record, request, turn)
        if isinstance(reply, Failed | OverBudget):
            return run, reply, turn + 1
        called = reply.calls()
        if not called:
            return run, reply, turn + 1
        conversation.append(_assistant(reply, called))
        answers: dict[int, str] = {}  # by the call's place in the turn
        hires: list[tuple[int, int, Any]] = []  # delegate calls not made yet
        approved: list[tuple[int, dict[str, Any], checkpoints.Approved, int]] = []
        for position, call in enumerate(called):
            index, calls = calls, calls + 1
            if hiring_from is not None and call["name"] == delegating.TOOL:
                done = delegating.known(run, record, index)
                if done is None:
                    hires.append((position, index, call.get("arguments")))
                else:
                    answers[position] = done
                continue
            run, checked = _checked(engine, run, step, record, tools, call, index)
            if isinstance(checked, NeedsApproval):
                return run, checked, turn + 1
            if isinstance(checked, str):
                answers[position] = checked
            else:
                approved.append((position, *checked, index))
        run, made, stopped = tool_steps.invoke_tools(
            engine, run, record, [(tool, ok, index) for _, tool, ok, index in approved]
        )
        for (position, *_), outcome in zip(approved, made, strict=False):
            answers[position] = _result(outcome)
        if stopped is not None:  # a limit with no room, or a rate limit to wait for
            return run, stopped, turn + 1
        if hires and hiring_from is not None:
            asked = [(index, arguments) for _, index, arguments in hires]
            run, hired = delegating.hire(engine, run, step, record, asked, hiring_from)
            if isinstance(hired, WaitingOnChildren | NeedsApproval):
                return run, hired, turn + 1
            answers |= {position: hired[index] for position, index, _ in hires}
        for position, call in enumerate(called):
            conversation.append(
                {"role": "tool", "tool_call_id": call["id"], "content": answers[position]}
            )
    turns = engine.max_tool_turns
    return (
        run,
        Failed(
            LIMIT_EXCEEDED,
            f"the reasoning loop reached its turn cap (HIERARCH_MAX_TOOL_TURNS {turns}) "
            "without an answer",
            retryable=False,
        ),
        turns,
    )


def _checked(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    tools: dict[str, dict[str, Any]],
    call: dict[str, Any],
    index: int,
) -> tuple[RunView, tuple[dict[str, Any], checkpoints.Approved] | str | NeedsApproval]:
    """One call the model asked for, before it is made, through the TOOL_CALL step's path:
    the tool and the arguments to call it with; the refusal the model hears (a person said
    no, the safety rails forbid it); or a person to ask first."""
    tool = tools[call["name"]]  # the gateway refuses a reply that calls a tool not offered
    arguments = call.get("arguments") or {}
    run, approved = checkpoints.tool_approval(engine, run, step, tool, arguments, record, index)
    if isinstance(approved, NeedsApproval):
        return run, approved
    if isinstance(approved, Failed):  # a person said no: the model hears it and goes on
        return run, _refusal(approved)
    refused = tool_steps.check_tool_call(engine, run, tool, approved.arguments, engine._data(run))
    if refused is not None:
        return run, _refusal(refused)
    return run, (tool, approved)


def _result(outcome: Completed | Failed) -> str:
    """What a call returned, as the model reads it: its output, or why it failed."""
    if isinstance(outcome, Failed):
        return _refusal(outcome)
    text = json.dumps(outcome.output, default=str, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _RESULT_CHARS else text[: _RESULT_CHARS - 1] + "…"


def _refusal(failed: Failed) -> str:
    return json.dumps({"error": {"code": failed.code, "message": failed.message}})


def _assistant(reply: ModelReply, called: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The model's turn as the conversation carries it on: its text and the calls it made."""
    return {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call.get("arguments") or {}, sort_keys=True),
                },
            }
            for call in called
        ],
    }
