"""THOUGHT steps and every model call: the request, the recording a replay reuses, what the
logs keep (pii_handling, audit_level), the content filters on the output."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from runs.engine import delegating, memory, strategies, summaries
from runs.engine import plan as plans
from runs.engine.definition import ReasoningConfig
from runs.engine.limits import NOTHING
from runs.engine.outcomes import Completed, Failed, NeedsApproval, OverBudget, WaitingOnChildren
from runs.engine.ports import (
    PII_ALLOW,
    PII_ENCRYPT,
    PII_REDACT,
    VALIDATION_ERROR,
    ModelCall,
    ModelError,
    ModelReply,
    ModelRequest,
    ReplyKey,
    ScreeningError,
)
from runs.engine.prompts import compose
from runs.engine.state import RunView, StepRecord

if TYPE_CHECKING:
    from runs.engine.core import Engine


def model_id(config: ReasoningConfig) -> str:
    """The model called: `model_name`, with `model_version` after a dash when one is set, as
    providers name their dated models (gpt-4o and 2024-08-06: gpt-4o-2024-08-06;
    claude-3-5-sonnet and 20241022); a name that already ends with the version is kept."""
    name, version = config["model_name"], (config.get("model_version") or "").strip()
    if not version or name.endswith(version):
        return name
    return f"{name}-{version}"


def model_request(engine: Engine, run: RunView, **kwargs: Any) -> ModelRequest:
    config = run.definition["logic_gate"]["reasoning_config"]
    return ModelRequest(
        provider=config["model_provider"],
        model=model_id(config),
        temperature=config["temperature"],
        top_p=config["top_p"],
        max_tokens=config["max_tokens"],
        reasoning_mode=config["reasoning_mode"],
        **kwargs,
    )


def call_model(
    engine: Engine, run: RunView, record: StepRecord, request: ModelRequest, index: int = 0
) -> tuple[RunView, ModelReply | Failed | OverBudget]:
    """A step's model call: the reply, or why there is none (the model failed, or a limit
    has no room for the call)."""
    try:
        return recorded_call(engine, run, record, request, index)
    except ModelError as exc:  # the model port's failure becomes the step's
        return run, Failed(exc.code, str(exc), retryable=exc.retryable)


def recorded_call(
    engine: Engine, run: RunView, record: StepRecord, request: ModelRequest, index: int
) -> tuple[RunView, ModelReply | OverBudget]:
    """A model call, recorded the moment it returns; a replay reuses the recording.
    OverBudget when a call limit or the budget has no room for it (nothing is called).
    The run as the record's commit wrote it."""
    key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}:{index}"
    recorded = engine.store.recall(run, ReplyKey(key))
    if recorded is not None:
        return run, revealed(engine, recorded)
    reserved = None
    if run.limited or run.budget_anchor is not None:
        estimate = cost_estimate(engine, request) if run.budget_anchor is not None else NOTHING
        refusal = engine.store.reserve(run, llm_calls=1, estimate=estimate)
        if refusal is not None:
            return run, OverBudget(refusal)
        reserved = estimate
    try:
        reply = engine.model.complete(request.traced(run.traceparent(record)))
    except ModelError:
        if reserved:
            engine.store.unreserve(run, reserved)
        raise
    kept_request, kept_reply = for_the_log(engine, run, request, reply)
    run = engine._record(run, ModelCall(record, key, kept_request, kept_reply, reserved))
    return run, reply


def pii_mode(engine: Engine, run: RunView) -> str:
    mode = run.definition["governance"]["human_oversight"].get("pii_handling", PII_REDACT)
    return PII_REDACT if mode == PII_ENCRYPT and engine.cipher is None else mode


def protect(engine: Engine, run: RunView, value: Any) -> Any:
    mode = pii_mode(engine, run)
    if mode == PII_ALLOW or value is None:
        return value
    encrypt = engine.cipher.encrypt if mode == PII_ENCRYPT and engine.cipher else None
    return engine.screening.pii_protect(value, mode, encrypt)


def revealed(engine: Engine, reply: ModelReply) -> ModelReply:
    """A recorded reply as the engine needs it again: encrypted personal data decrypted
    (redacted data stays redacted: a replay continues with what the log kept)."""
    if engine.cipher is None:
        return reply
    decrypt = engine.cipher.decrypt

    def reveal(value: Any) -> Any:
        return None if value is None else engine.screening.pii_reveal(value, decrypt)

    return replace(
        reply,
        content=reveal(reply.content),
        parsed=reveal(reply.parsed),
        tool_arguments=reveal(reply.tool_arguments),
        tool_calls=tuple(reveal(list(reply.tool_calls)) or ()),
    )


def for_the_log(
    engine: Engine, run: RunView, request: ModelRequest, reply: ModelReply
) -> tuple[ModelRequest, ModelReply]:
    """The call as its log row keeps it: the prompt only when the entity logs thoughts
    (log_thoughts, and an audit_level above MINIMAL), personal data in prompt and answer
    as pii_handling says (ALLOW, REDACT, ENCRYPT)."""
    oversight = run.definition["governance"]["human_oversight"]
    logging = run.definition["observability"]["logging"]
    if not logging.get("log_thoughts", True) or oversight.get("audit_level") == "MINIMAL":
        request = replace(request, messages=({"role": "system", "content": NOT_LOGGED},))
    if pii_mode(engine, run) == "ALLOW":
        return request, reply
    # One pass over the four values: each is scanned as it would be on its own.
    messages, content, parsed, tool_arguments = protect(
        engine, run, (list(request.messages), reply.content, reply.parsed, reply.tool_arguments)
    )
    request = replace(request, messages=tuple(messages))
    reply = replace(reply, content=content, parsed=parsed, tool_arguments=tool_arguments)
    if reply.tool_calls:  # a reasoning loop's turn: its calls' arguments as well
        reply = replace(reply, tool_calls=tuple(protect(engine, run, list(reply.tool_calls))))
    return request, reply


def cost_estimate(engine: Engine, request: ModelRequest) -> Decimal:
    """The most a call can cost, to set aside before it is made (0 when unknown)."""
    estimate = getattr(engine.model, "estimate_cost", None)
    return estimate(request) if estimate is not None else NOTHING


def prompt_messages(
    engine: Engine, run: RunView, instruction: str
) -> tuple[RunView, tuple[dict[str, Any], ...] | Failed | OverBudget]:
    """The prompt of a THOUGHT or tool-arguments call under the entity's context
    engineering, memory and iteration context; the run with the memory it read (and the
    summary of earlier passes it made, or why it could not: then no prompt)."""
    definition = run.definition
    model_name = definition["logic_gate"]["reasoning_config"]["model_name"]
    run, failed = summaries.pass_summary(engine, run)
    if failed is not None:
        return run, failed
    iterations = summaries.earlier_passes(run)
    remembered = run.memory
    if remembered is None:
        query = memory.reading(run, engine.clock.now())
        items = engine.store.recall(run, query) if query is not None else []
        remembered = memory.oldest_first(items, query)
        run = run.changed(memory=remembered)
    messages, dropped = compose(
        definition,
        instruction=instruction,
        run_input=run.input,
        state=run.state,
        plan=run.plan,
        memory=remembered,
        iterations=iterations,
        count_tokens=lambda text: engine.model.count_tokens(model_name, text),
        artifact_store=engine.store.artifacts(run),
    )
    if dropped:
        run = run.noted("context.trimmed", dropped=dropped)
    return run, messages


def thought_step(
    engine: Engine, run: RunView, step: dict[str, Any], record: StepRecord
) -> tuple[
    RunView, StepRecord, Completed | Failed | OverBudget | NeedsApproval | WaitingOnChildren
]:
    """A THOUGHT step: one model call under the entity's prompt (a REACT entity with tools:
    the reasoning loop, runs/engine/react.py), its answer screened. The step's record as it
    goes on (its input the prompt), and the outcome (WaitingOnChildren: the loop hired
    subordinates and the run waits on them)."""
    output_schema = run.definition["io_contract"]["output"]["schema"]
    data = engine._data(run)
    template = step.get("prompt_template") or (
        "Answer with the output this entity promises, as JSON."
        if output_schema.get("properties")
        else "Answer the request."
    )
    instruction = plans.render_template(template, data)
    schema = output_schema if output_schema.get("properties") else None
    record = record.with_input({"prompt": instruction})
    run, messages = prompt_messages(engine, run, instruction)
    if isinstance(messages, Failed | OverBudget):
        return run, record, messages
    judge_index = 1
    if run.definition["logic_gate"]["reasoning_config"]["reasoning_mode"] == "REACT":
        from runs.engine import react  # only a REACT entity's steps need it

        if react.loops(run):
            run, answer, judge_index = react.reasoning_loop(
                engine, run, step, record, messages, schema
            )
            if isinstance(answer, Failed | OverBudget | NeedsApproval | WaitingOnChildren):
                return run, record, answer
            run = delegating.done(run)
            return _answered(engine, run, step, record, schema, answer, judge_index)
    strategy = strategies.strategy_of(run)
    if strategy is not None:  # REFLECTION, TREE_OF_THOUGHTS: several calls of the step
        first_run = run

        def request_for(**kwargs: Any) -> ModelRequest:
            return model_request(engine, first_run, **kwargs)

        def call(
            run: RunView, request: ModelRequest, index: int
        ) -> tuple[RunView, ModelReply | Failed | OverBudget]:
            return call_model(engine, run, record, request, index)

    if strategy == "TREE_OF_THOUGHTS":
        run, reply, judge_index = strategies.branch(run, messages, schema, request_for, call)
    else:
        request = model_request(
            engine, run, messages=messages, response_schema=schema, purpose="THOUGHT"
        )
        run, reply = call_model(engine, run, record, request)
        if strategy == "REFLECTION" and not isinstance(reply, Failed | OverBudget):
            run, reply, judge_index = strategies.reflect(
                run, messages, schema, reply, request_for, call
            )
    if isinstance(reply, Failed | OverBudget):
        return run, record, reply
    return _answered(engine, run, step, record, schema, reply, judge_index)


def _answered(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    schema: dict[str, Any] | None,
    reply: ModelReply,
    judge_index: int,
) -> tuple[RunView, StepRecord, Completed | Failed | OverBudget]:
    """The step's outcome from the model's answer: the JSON asked for, screened."""
    if schema is not None and not isinstance(reply.parsed, dict):
        return run, record, Failed("LLM_ERROR", "the model did not answer the JSON asked for")
    output = reply.parsed if schema is not None else {"text": reply.content}
    run, screened = screened_output(engine, run, step, record, output, judge_index)
    if isinstance(screened, Failed | OverBudget):
        return run, record, screened
    return run, record, Completed(screened)


def screened_output(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    output: dict[str, Any],
    judge_index: int = 1,
) -> tuple[RunView, dict[str, Any] | Failed | OverBudget]:
    """The model's output through the entity's content filters (seed 000 §3.7.4): what
    they flag is redacted, or fails the step, as `on_flagged_output` says, and the
    trace says which filters flagged what kind (never the flagged text). The BIAS judge's
    call is the step's model call `judge_index` (after a reasoning loop's turns)."""
    rails = run.definition["governance"]["safety_rails"]
    filters = set(rails.get("content_filters") or [])
    if not filters:
        return run, output
    kinds: list[str] = []
    screened = output
    local = filters - {"BIAS"}
    if local:
        strings = _strings(output)
        for findings in engine.screening.scan_many(strings, local):
            kinds += [f"{finding.filter}:{finding.kind}" for finding in findings]
        if kinds:
            screened = engine.screening.redact_value(output, local)
    if "BIAS" in filters:
        config = run.definition["logic_gate"]["reasoning_config"]
        text = "\n".join(_strings(output))
        judge = engine.screening.bias_judge_request(
            text, provider=config["model_provider"], model=model_id(config)
        )
        run, reply = call_model(engine, run, record, judge, judge_index)
        if isinstance(reply, Failed | OverBudget):
            return run, reply
        try:
            verdict = engine.screening.bias_verdict(reply, text=text)
        except ScreeningError as exc:
            return run, Failed("LLM_ERROR", f"the bias judge failed: {exc}")
        if verdict is not None:
            kinds.append("BIAS:BIAS")
            screened = _replace_strings(screened, "[REDACTED:BIAS]")
    if not kinds:
        return run, output
    kinds = sorted(set(kinds))
    action = rails.get("on_flagged_output", "REDACT")
    run = run.noted("safety.flagged", step=step["name"], kinds=kinds, action=action)
    if action == "FAIL":
        return run, Failed(
            VALIDATION_ERROR,
            "the content filters flagged the model's output: " + ", ".join(kinds),
        )
    return run, screened


NOT_LOGGED = "[not logged: this entity's audit settings leave it out]"


class RecordingModel:
    """A ModelClient for the pure modules (review, planning) whose every call is recorded
    under one step record, and reused on replay. `run`: the run as the last call's record
    wrote it, for the caller to go on from."""

    def __init__(self, engine: Engine, run: RunView, record: StepRecord):
        self.engine, self.run, self.record, self.index = engine, run, record, 0

    def complete(self, request: ModelRequest) -> ModelReply:
        """The recorded call. The review module speaks the ModelClient port, which answers
        a reply or raises: no room for the call is raised as the LimitReached it carries,
        and `advance` turns it back into the run's OverBudget ending."""
        index, self.index = self.index, self.index + 1
        self.run, reply = recorded_call(self.engine, self.run, self.record, request, index)
        if isinstance(reply, OverBudget):
            raise reply.limit
        return reply

    def count_tokens(self, model: str, text: str) -> int:
        return self.engine.model.count_tokens(model, text)


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _replace_strings(value: Any, replacement: str) -> Any:
    if isinstance(value, str):
        return replacement
    if isinstance(value, dict):
        return {key: _replace_strings(item, replacement) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, replacement) for item in value]
    return value
