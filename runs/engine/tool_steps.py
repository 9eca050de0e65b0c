"""TOOL_CALL steps: the arguments, the safety rails before the call, the call recorded with
its idempotency key."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from runs.engine import checkpoints, hitl, thoughts
from runs.engine import plan as plans
from runs.engine.limits import NOTHING
from runs.engine.outcomes import Completed, Failed, NeedsApproval, OverBudget
from runs.engine.ports import (
    PERMISSION_DENIED,
    VALIDATION_ERROR,
    ResultKey,
    ToolCall,
    ToolError,
    ToolInvocation,
    ToolResult,
)
from runs.engine.state import (
    RunView,
    StepRecord,
)
from runs.engine.storable import storable
from runs.engine.thoughts import NOT_LOGGED

if TYPE_CHECKING:
    from runs.engine.core import Engine


def tool_step(
    engine: Engine, run: RunView, step: dict[str, Any], record: StepRecord
) -> tuple[RunView, StepRecord, Completed | Failed | OverBudget | NeedsApproval]:
    """A TOOL_CALL step: its arguments (mapped, or asked of the model), a person's approval
    where one is needed, the safety rails, then the call (or its recorded result). The
    step's record as it goes on (its input the arguments), and the outcome."""
    tools = {t["tool_id"]: t for t in run.definition["capabilities"]["tools"]}
    tool = tools.get(step["tool_id"])
    if tool is None or "function_schema" not in tool:
        return run, record, Failed(VALIDATION_ERROR, f"tool {step['tool_id']!r} is not available")
    data = engine._data(run)
    run, arguments = tool_arguments(engine, run, step, tool, record, data)
    if not isinstance(arguments, dict):
        return run, record, arguments
    record = record.with_input(arguments)
    run, approved = checkpoints.tool_approval(engine, run, step, tool, arguments, record)
    if not isinstance(approved, checkpoints.Approved):
        return run, record, approved
    record = record.with_input(approved.arguments)
    refused = check_tool_call(engine, run, tool, approved.arguments, data)
    if refused is not None:
        return run, record, refused
    run, outcome = invoke_tool(engine, run, tool, approved, record)
    return run, record, outcome


def tool_arguments(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    tool: dict[str, Any],
    record: StepRecord,
    data: dict[str, Any],
) -> tuple[RunView, dict[str, Any] | Failed | OverBudget]:
    """The call's arguments: the step's input mapping, else the model's choice."""
    function = tool["function_schema"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    if step.get("input_mapping"):
        return run, plans.map_input(step["input_mapping"], parameters, data)
    name = function.get("name") or tool["tool_id"]
    run, messages = thoughts.prompt_messages(
        engine,
        run,
        f"Call the tool {name} with the right arguments for this step: {step['name']}.",
    )
    if isinstance(messages, Failed | OverBudget):
        return run, messages
    request = thoughts.model_request(
        engine,
        run,
        messages=messages,
        tools=(
            {
                "name": name,
                "description": function.get("description", ""),
                "parameters": parameters,
            },
        ),
        tool_choice=name,
        purpose="TOOL_ARGUMENTS",
    )
    run, reply = thoughts.call_model(engine, run, record, request)
    if isinstance(reply, Failed | OverBudget):
        return run, reply
    return run, reply.tool_arguments or {}


def invoke_tool(
    engine: Engine,
    run: RunView,
    tool: dict[str, Any],
    approved: checkpoints.Approved,
    record: StepRecord,
    index: int | None = None,
) -> tuple[RunView, Completed | Failed | OverBudget]:
    """The tool call with its idempotency key, recorded the moment it returns; a replay
    reuses the recorded result. `index`: the call's place among a step's several calls (a
    reasoning loop's), in its key."""
    run, begun = _begin(engine, run, tool, approved, record, index)
    if not isinstance(begun, _Pending):
        return run, begun
    try:
        result: ToolResult | ToolError = engine.tools.invoke(begun.invocation)
    except ToolError as exc:  # the tool port's failure becomes the step's
        result = exc
    return _finish(engine, run, record, begun, result)


def invoke_tools(
    engine: Engine,
    run: RunView,
    record: StepRecord,
    calls: list[tuple[dict[str, Any], checkpoints.Approved, int]],
) -> tuple[RunView, list[Completed | Failed], OverBudget | Failed | None]:
    """Several calls a model asked for in one turn (each: the tool, its approved arguments,
    its index in the step), in their order as `invoke_tool` makes them, except that
    consecutive READ calls are made at the same time where the tool runner can (its
    `prepare` and `call_all`: several waiting on the network at once). Answers each call's
    outcome as far as they went, and what stopped them: no room for the next call
    (OverBudget), or a rate limit to wait for (Failed with `retry_after_s`)."""
    runner: Any = engine.tools
    concurrent = hasattr(runner, "prepare") and hasattr(runner, "call_all")
    outcomes: list[Completed | Failed] = []
    batch: list[tuple[_Pending, Any]] = []

    def flush(run: RunView) -> RunView:
        made = runner.call_all([prepared for _, prepared in batch]) if batch else []
        for (pending, _), result in zip(batch, made, strict=True):
            run, outcome = _finish(engine, run, record, pending, result)
            outcomes.append(outcome)
        batch.clear()
        return run

    for tool, approved, index in calls:
        reading = concurrent and tool.get("permissions") == "READ"
        if not reading:
            run = flush(run)
            run, outcome = invoke_tool(engine, run, tool, approved, record, index)
            if isinstance(outcome, OverBudget):
                return run, outcomes, outcome
            outcomes.append(outcome)
            if isinstance(outcome, Failed) and outcome.retry_after_s is not None:
                return run, outcomes, outcome
            continue
        run, begun = _begin(engine, run, tool, approved, record, index)
        if isinstance(begun, OverBudget):
            return flush(run), outcomes, begun
        if isinstance(begun, Completed):  # recorded before: read back
            run = flush(run)
            outcomes.append(begun)
            continue
        try:
            batch.append((begun, runner.prepare(begun.invocation)))
        except ToolError as exc:  # refused before the call: a permission, a rate limit
            run = flush(run)
            run, failed = _finish(engine, run, record, begun, exc)
            outcomes.append(failed)
            if isinstance(failed, Failed) and failed.retry_after_s is not None:
                return run, outcomes, failed
    return flush(run), outcomes, None


@dataclass(frozen=True)
class _Pending:
    """A call about to be made: its invocation, what its log row keeps of it, and what was
    set aside for it."""

    invocation: ToolInvocation
    logged: ToolInvocation
    reserved: Any


def _begin(
    engine: Engine,
    run: RunView,
    tool: dict[str, Any],
    approved: checkpoints.Approved,
    record: StepRecord,
    index: int | None,
) -> tuple[RunView, _Pending | Completed | OverBudget]:
    """Before a call: its recorded result (a replay), no room for it, or the call to make."""
    key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}"
    if index is not None:
        key = f"{key}:{index}"
    invocation = ToolInvocation(
        tool=tool,
        arguments=approved.arguments,
        idempotency_key=key,
        workspace_id=run.workspace_id,
        run_id=run.id,
        sandbox=run.sandbox or bool(tool.get("sandbox_mode")),
        caller_id=run.created_by_id,
        approved_by=approved.by,
        traceparent=run.traceparent(record),
    )
    recorded = engine.store.recall(run, ResultKey(key))
    if recorded is not None:
        if engine.cipher is None:
            return run, Completed(recorded.output)
        return run, Completed(engine.screening.pii_reveal(recorded.output, engine.cipher.decrypt))
    reserved = None
    if run.limited:  # a tool call costs nothing to a budget, but may hit a call limit
        refusal = engine.store.reserve(run, tool_calls=1, estimate=NOTHING)
        if refusal is not None:
            return run, OverBudget(refusal)
        reserved = NOTHING
    return run, _Pending(invocation, tool_for_the_log(engine, run, invocation), reserved)


def _finish(
    engine: Engine,
    run: RunView,
    record: StepRecord,
    pending: _Pending,
    result: ToolResult | ToolError,
) -> tuple[RunView, Completed | Failed]:
    """After a call: recorded the moment it returned, its failure as the step's."""
    if isinstance(result, ToolError):
        message = storable(str(result))  # it may quote what a server answered
        error = thoughts.protect(engine, run, message)
        run = engine._record(run, ToolCall(record, pending.logged, None, error, pending.reserved))
        return run, Failed(
            result.code,
            message,
            retryable=not result.permanent,
            retry_after_s=getattr(result, "retry_after_s", None),
        )
    kept = replace(result, output=thoughts.protect(engine, run, result.output))
    run = engine._record(run, ToolCall(record, pending.logged, kept, reserved=pending.reserved))
    return run, Completed(result.output)


def tool_for_the_log(engine: Engine, run: RunView, invocation: ToolInvocation) -> ToolInvocation:
    """The call's arguments as its log row keeps them: none when the entity does not log
    tool calls (log_tool_calls, audit_level MINIMAL), else as pii_handling says. The
    result is always kept (a replay returns it instead of calling again)."""
    oversight = run.definition["governance"]["human_oversight"]
    logging = run.definition["observability"]["logging"]
    if not logging.get("log_tool_calls", True) or oversight.get("audit_level") == "MINIMAL":
        return replace(invocation, arguments={"_": NOT_LOGGED})
    return replace(invocation, arguments=thoughts.protect(engine, run, invocation.arguments))


def check_tool_call(
    engine: Engine,
    run: RunView,
    tool: dict[str, Any],
    arguments: dict[str, Any],
    data: dict[str, Any],
) -> Failed | None:
    """The entity's safety rails before a tool call (seed 000 §3.7.4): an action
    restriction on the tool, and every behavioral constraint that carries a JSONLogic
    rule, evaluated against the state plus `tool` ({tool_id, arguments}): false forbids."""
    tool_id = tool["tool_id"]
    name = run.definition["identity"]["name"]
    rails = run.definition["governance"]["safety_rails"]
    for restriction in rails.get("action_restrictions") or []:
        if restriction["restricted_action"] not in (tool_id, f"tool:{tool_id}"):
            continue
        if restriction.get("blocked_entirely"):
            return Failed(
                PERMISSION_DENIED,
                f"{name} may not call the tool {tool_id}: action_restrictions block it",
            )
        # requires_approval: a person approved this call before (_tool_approval).
    locked = run.state.get(hitl.LOCKED_KEY) or []
    constraints = run.definition["identity"]["persona"].get("behavioral_constraints") or []
    ruled = [
        c
        for c in constraints
        if isinstance(c, dict) and c.get("rule") is not None and c not in locked
    ]
    if not ruled and not locked:
        return None
    facts = {**data, "tool": {"tool_id": tool_id, "arguments": arguments}}
    refused = hitl.forbidden_by_lock(run.state, tool_id, facts) if locked else None
    if refused is not None:
        return Failed(
            PERMISSION_DENIED,
            f"a constraint a person locked forbids calling {tool_id}: {refused}",
        )
    for constraint in ruled:
        if not plans.holds(constraint["rule"], facts):
            return Failed(
                VALIDATION_ERROR,
                f"the behavioral constraint {constraint['constraint']!r} forbids calling "
                f"{tool_id} with these arguments",
            )
    return None
