"""`advance(run_id)`: take the run's lease, do the next piece of work, record it, return.

Never blocks on a child or a human: child steps start child runs and leave the run WAITING;
the last child to finish wakes the parent. Failures are data: a step that fails ends the run
with an error code from the seed's families, and every row written so far stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from runs.engine import plan as plans
from runs.engine import retry
from runs.engine.ports import (
    INTERNAL_ERROR,
    INVALID_INPUT,
    LIMIT_EXCEEDED,
    NOT_ACTIVE,
    VALIDATION_ERROR,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    ToolError,
    ToolInvocation,
    ToolResult,
    ToolRunner,
)
from runs.engine.prompts import messages_for

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass
class RunView:
    """The engine's working copy of a run; the store loads and saves it."""

    id: str
    trace_id: str
    workspace_id: int
    definition: dict
    status: str
    input: dict
    state: dict
    plan: list[dict] | None
    cursor: int
    iteration: int
    depth: int
    parent_id: str | None
    entity_status: str = "ACTIVE"
    attempt: int = 1  # of the step at the cursor
    depth_limit: int = 5
    lineage: list[str] = field(default_factory=list)  # ancestor run ids, root first
    parent_step_key: str = ""
    began_at: Any = None
    started: bool = False
    resumed: bool = False  # the last worker died mid-advance
    created_by_id: Any = None
    pending_steps: list[StepRecord] = field(default_factory=list)
    pending_events: Events = field(default_factory=lambda: Events())
    output: dict | None = None
    error_code: str = ""
    error_message: str = ""
    cancel_requested: bool = False


@dataclass(frozen=True)
class ChildOutcome:
    run_id: str
    step_key: str
    status: str
    output: Any
    error_code: str
    error_message: str
    entity_name: str


@dataclass(frozen=True)
class ChildRequest:
    step_key: str
    group_index: int
    entity_ref: str
    input: dict


@dataclass
class StepRecord:
    key: str
    position: int
    name: str
    type: str
    status: str
    iteration: int
    attempt: int = 1
    input: Any = None
    output: Any = None
    error_code: str = ""
    error_message: str = ""
    started_at: Any = None


@dataclass
class Events:
    items: list[tuple[str, dict]] = field(default_factory=list)

    def add(self, kind: str, **payload: Any) -> None:
        self.items.append((kind, payload))


class RunStore(Protocol):
    def load(self, run_id: str) -> RunView | None:
        """Claim the run's lease and read it; None when it is finished or someone holds it."""

    def save(self, run: RunView, *, steps: list[StepRecord], events: Events) -> None:
        """Persist the run, step records and events in one commit."""

    def spawn(
        self, run: RunView, *, children: list[ChildRequest], steps: list[StepRecord], events: Events
    ) -> list[str]:
        """Create child runs of the current step (pinned to each child's current version),
        leave the run WAITING and persist, in one commit; answer the children's ids."""

    def children(self, run: RunView, step_keys: list[str]) -> list[ChildOutcome] | None:
        """The outcomes of the current group's child runs; None while one is unfinished."""

    def finish(self, run: RunView, *, steps: list[StepRecord], events: Events) -> str | None:
        """Persist a terminal run; answer the parent's id when this was the last unfinished
        child of the parent's current step."""

    def release(self, run: RunView) -> None: ...

    def schedule(
        self, run: RunView, delay_s: float, *, steps: list[StepRecord], events: Events
    ) -> None:
        """Persist the run with a due time `delay_s` from now; nothing advances it before."""

    def recorded_reply(self, run: RunView, call_key: str) -> ModelReply | None: ...

    def record_model_call(
        self,
        run: RunView,
        step: StepRecord,
        call_key: str,
        request: ModelRequest,
        reply: ModelReply,
    ) -> None: ...

    def recorded_tool_result(self, run: RunView, key: str) -> ToolResult | None: ...

    def record_tool_call(
        self,
        run: RunView,
        step: StepRecord,
        invocation: ToolInvocation,
        result: ToolResult | None,
        error: str = "",
    ) -> None: ...

    def child_definition(self, run: RunView, entity_ref: str) -> dict | None:
        """The current definition of a child entity of this run's workspace, for its input
        schema; None when it no longer exists."""

    def children_definitions(self, run: RunView, refs: list[str]) -> dict[str, dict]:
        """`child_definition` for several references at once."""


class StepFailed(Exception):
    def __init__(self, code: str, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@dataclass
class Engine:
    store: RunStore
    model: ModelClient
    tools: ToolRunner
    enqueue: Callable[[str], None]
    enqueue_later: Callable[[str, float], None] = lambda run_id, delay_s: None
    max_steps_per_advance: int = 200

    def advance(self, run_id: str) -> None:
        """Do the run's next pieces of work until it waits, pauses or ends."""
        run = self.store.load(run_id)
        if run is None:
            return
        try:
            self._drive(run)
        except Exception as exc:  # a bug must not leave the run RUNNING forever
            if run.status not in TERMINAL:
                self._fail(run, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", Events(), [])
            raise
        finally:
            self.store.release(run)

    # -- the loop ---------------------------------------------------------------------------

    def _drive(self, run: RunView) -> None:
        if run.status in TERMINAL:
            return
        if run.cancel_requested:
            self._finish(run, "CANCELLED", "CANCELLED", "the run was cancelled", Events(), [])
            return
        if run.status == "PENDING" and not self._start(run):
            return
        for _ in range(self.max_steps_per_advance):
            if run.status == "WAITING":
                if not self._join(run):
                    return
                continue
            group = plans.group_at(run.plan or [], run.cursor)
            if not group:
                self._complete(run)
                return
            first = run.plan[group[0]]
            if first["type"] == plans.CHILD:
                if not self._start_children(run, group):
                    continue
                return
            if not self._run_step(run, group[0]):
                return
        run.status = "RUNNING"
        self.store.save(run, steps=[], events=Events())
        self.enqueue(run.id)  # a long plan yields the worker, then goes on

    def _start(self, run: RunView) -> bool:
        events = Events()
        if run.entity_status != "ACTIVE":
            self._fail(
                run,
                NOT_ACTIVE,
                f"{run.definition['identity']['name']} is {run.entity_status}; only ACTIVE "
                "entities run",
                events,
                [],
            )
            return False
        problems = input_problems(run.definition, run.input)
        if problems:
            self._fail(run, INVALID_INPUT, "; ".join(problems), events, [])
            return False
        names = {}
        if not run.definition["planning"]["static_plan"].get("enabled"):
            refs = [link["child_id"] for link in run.definition["hierarchy"]["children"]]
            for ref, child in self.store.children_definitions(run, refs).items():
                names[ref] = child["identity"]["name"]
        run.plan = plans.build_static_plan(run.definition, names)
        run.state = dict(run.input)
        run.status = "RUNNING"
        run.cursor = 0
        events.add("run.status", status="RUNNING", plan=[s["name"] for s in run.plan])
        # Written with the next write of this run: replaying a start is deterministic.
        self._later(run, [], events)
        return True

    @staticmethod
    def _later(run: RunView, steps: list[StepRecord], events: Events) -> None:
        """Buffer records for the store's next write of this run (each write takes them).
        Safe because every model and tool call is recorded at once, in its own commit: a
        replay after a crash reuses them instead of paying again."""
        run.pending_steps.extend(steps)
        run.pending_events.items.extend(events.items)

    def _data(self, run: RunView) -> dict:
        return plans.logic_data(run.state, run.input, run.iteration)

    def _start_children(self, run: RunView, group: list[int]) -> bool:
        """Start the group's child runs; False when every child was skipped by its condition."""
        data = self._data(run)
        steps: list[StepRecord] = []
        requests: list[ChildRequest] = []
        events = Events()
        for position in group:
            step = run.plan[position]
            if not plans.holds(step.get("condition"), data):
                record = StepRecord(
                    step["key"], position, step["name"], step["type"], "SKIPPED", run.iteration
                )
                steps.append(record)
                events.add("step.skipped", step=step["name"], reason="condition is false")
                continue
            child = self.store.child_definition(run, step["target_entity"])
            if child is None:
                self._fail(
                    run,
                    VALIDATION_ERROR,
                    f"step {step['name']!r}: child {step['target_entity']!r} no longer exists",
                    events,
                    steps,
                )
                return True
            child_input = plans.map_input(
                step.get("input_mapping") or {},
                child["io_contract"]["input"]["schema"],
                data,
            )
            steps.append(
                StepRecord(
                    step["key"],
                    position,
                    step["name"],
                    step["type"],
                    "WAITING",
                    run.iteration,
                    input=child_input,
                )
            )
            requests.append(
                ChildRequest(step["key"], len(requests), step["target_entity"], child_input)
            )
            events.add("step.started", step=step["name"], type=step["type"])
        if requests and run.depth + 1 > run.depth_limit:
            self._fail(
                run,
                LIMIT_EXCEEDED,
                f"starting {requests[0].entity_ref!r} would nest {run.depth + 1} levels deep, "
                f"more than max_recursion_depth {run.depth_limit} of the run's root",
                events,
                steps,
            )
            return True
        if not requests:
            run.cursor = group[-1] + 1
            self.store.save(run, steps=steps, events=events)
            return False
        run.status = "WAITING"
        run.waiting_on = [r.step_key for r in requests]  # type: ignore[attr-defined]
        ids = self.store.spawn(run, children=requests, steps=steps, events=events)
        for child_id in ids:
            self.enqueue(child_id)
        return True

    def _join(self, run: RunView) -> bool:
        """Collect the current group's children; False while one is unfinished."""
        group = plans.group_at(run.plan or [], run.cursor)
        keys = [run.plan[i]["key"] for i in group]
        outcomes = self.store.children(run, keys)
        if outcomes is None:
            return False
        events = Events()
        steps: list[StepRecord] = []
        failed: ChildOutcome | None = None
        position_of = {run.plan[i]["key"]: i for i in group}
        for outcome in outcomes:
            step = run.plan[position_of[outcome.step_key]]
            if outcome.status == "COMPLETED":
                run.state = plans.apply_output(run.state, step["name"], outcome.output)
                steps.append(
                    StepRecord(
                        step["key"],
                        position_of[outcome.step_key],
                        step["name"],
                        step["type"],
                        "COMPLETED",
                        run.iteration,
                        output=outcome.output,
                    )
                )
                events.add("step.finished", step=step["name"], status="COMPLETED")
            else:
                failed = failed or outcome
                steps.append(
                    StepRecord(
                        step["key"],
                        position_of[outcome.step_key],
                        step["name"],
                        step["type"],
                        "FAILED",
                        run.iteration,
                        error_code=outcome.error_code,
                        error_message=outcome.error_message,
                    )
                )
                events.add("step.finished", step=step["name"], status=outcome.status)
        if failed is not None:
            code = failed.error_code or "CHILD_FAILED"
            message = f"{failed.entity_name} {failed.status.lower()}: {failed.error_message}"
            self._fail(run, code, message, events, steps)
            return False
        run.status = "RUNNING"
        self._go_on(run, run.plan[group[-1]], group[-1], events, steps)
        return run.status == "RUNNING"

    def _go_on(
        self, run: RunView, step: dict, position: int, events: Events, steps: list[StepRecord]
    ) -> None:
        """After a step: follow its exit conditions, else the next step; persist."""
        target = plans.next_index(run.plan, step, self._data(run))
        if target == "END":
            run.cursor = len(run.plan)
            events.add("step.exit", step=step["name"], to="END")
        elif target == "ESCALATE":
            events.add("step.exit", step=step["name"], to="ESCALATE")
            run.status = "BLOCKED"
            run.error_code = "ESCALATED"
            run.error_message = (
                f"step {step['name']!r} asked for a human decision (exit condition ESCALATE)"
            )
            self.store.save(run, steps=steps, events=events)
            return
        elif isinstance(target, int):
            run.cursor = target
            events.add("step.exit", step=step["name"], to=run.plan[target]["name"])
        else:
            run.cursor = position + 1
        run.attempt = 1
        upcoming = run.plan[run.cursor] if run.cursor < len(run.plan) else None
        if upcoming is None or upcoming["type"] == plans.CHILD:
            # The run ends or starts children next: that write carries this step.
            self._later(run, steps, events)
        else:
            self.store.save(run, steps=steps, events=events)

    def _run_step(self, run: RunView, position: int) -> bool:
        step = run.plan[position]
        record = StepRecord(
            step["key"],
            position,
            step["name"],
            step["type"],
            "RUNNING",
            run.iteration,
            attempt=run.attempt,
        )
        events = Events()
        events.add("step.started", step=step["name"], type=step["type"])
        try:
            if step["type"] == "TOOL_CALL":
                output = self._tool_step(run, step, record)
            else:
                output = self._thought_step(run, step, record)
        except StepFailed as failure:
            record.status, record.error_code = "FAILED", failure.code
            record.error_message = str(failure)
            events.add(
                "step.finished",
                step=step["name"],
                status="FAILED",
                error=failure.code,
                attempt=record.attempt,
            )
            policy = run.definition["logic_gate"]["retry_policy"]
            decision = retry.decide(failure.code, failure.retryable, record.attempt, policy)
            if isinstance(decision, retry.Retry):
                run.attempt = decision.attempt
                events.add(
                    "step.retry",
                    step=step["name"],
                    attempt=decision.attempt,
                    delay_s=decision.delay_s,
                )
                self.store.schedule(run, decision.delay_s, steps=[record], events=events)
                self.enqueue_later(run.id, decision.delay_s)
                return False
            message = f"step {step['name']!r}: {failure}"
            if record.attempt > 1:
                message += f" (after {record.attempt} attempts; {decision.reason})"
            self._fail(run, failure.code, message, events, [record])
            return False
        record.status, record.output = "COMPLETED", output
        run.state = plans.apply_output(run.state, step["name"], output)
        events.add("step.finished", step=step["name"], status="COMPLETED")
        self._go_on(run, step, position, events, [record])
        return run.status == "RUNNING"

    # -- steps --------------------------------------------------------------------------------

    def _model_request(self, run: RunView, **kwargs: Any) -> ModelRequest:
        config = run.definition["logic_gate"]["reasoning_config"]
        return ModelRequest(
            provider=config["model_provider"],
            model=config["model_name"],
            temperature=config["temperature"],
            top_p=config["top_p"],
            max_tokens=config["max_tokens"],
            reasoning_mode=config["reasoning_mode"],
            **kwargs,
        )

    def _call_model(
        self, run: RunView, record: StepRecord, request: ModelRequest, index: int = 0
    ) -> ModelReply:
        key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}:{index}"
        recorded = self.store.recorded_reply(run, key)
        if recorded is not None:
            return recorded
        try:
            reply = self.model.complete(request)
        except ModelError as exc:
            raise StepFailed(exc.code, str(exc), retryable=exc.retryable) from None
        self.store.record_model_call(run, record, key, request, reply)
        return reply

    def _thought_step(self, run: RunView, step: dict, record: StepRecord) -> Any:
        output_schema = run.definition["io_contract"]["output"]["schema"]
        data = self._data(run)
        template = step.get("prompt_template") or (
            "Answer with the output this entity promises, as JSON."
            if output_schema.get("properties")
            else "Answer the request."
        )
        instruction = plans.render_template(template, data)
        schema = output_schema if output_schema.get("properties") else None
        request = self._model_request(
            run,
            messages=messages_for(
                run.definition,
                instruction=instruction,
                data={"input": run.input, "state": run.state},
                reasoning_mode=run.definition["logic_gate"]["reasoning_config"]["reasoning_mode"],
            ),
            response_schema=schema,
            purpose="THOUGHT",
        )
        record.input = {"prompt": instruction}
        reply = self._call_model(run, record, request)
        if schema is not None:
            if not isinstance(reply.parsed, dict):
                raise StepFailed("LLM_ERROR", "the model did not answer the JSON asked for")
            return reply.parsed
        return {"text": reply.content}

    def _tool_step(self, run: RunView, step: dict, record: StepRecord) -> Any:
        tools = {t["tool_id"]: t for t in run.definition["capabilities"]["tools"]}
        tool = tools.get(step["tool_id"])
        if tool is None or "function_schema" not in tool:
            raise StepFailed(VALIDATION_ERROR, f"tool {step['tool_id']!r} is not available")
        function = tool["function_schema"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        data = self._data(run)
        if step.get("input_mapping"):
            arguments = plans.map_input(step["input_mapping"], parameters, data)
        else:
            name = function.get("name") or tool["tool_id"]
            request = self._model_request(
                run,
                messages=messages_for(
                    run.definition,
                    instruction=f"Call the tool {name} with the right arguments for this step: "
                    f"{step['name']}.",
                    data={"input": run.input, "state": run.state},
                    reasoning_mode=run.definition["logic_gate"]["reasoning_config"][
                        "reasoning_mode"
                    ],
                ),
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
            reply = self._call_model(run, record, request)
            arguments = reply.tool_arguments or {}
        record.input = arguments
        key = f"{run.id}:{record.key}:{record.iteration}:{record.attempt}"
        invocation = ToolInvocation(
            tool=tool,
            arguments=arguments,
            idempotency_key=key,
            workspace_id=run.workspace_id,
            run_id=run.id,
            sandbox=bool(tool.get("sandbox_mode")),
        )
        recorded = self.store.recorded_tool_result(run, key)
        if recorded is not None:
            return recorded.output
        try:
            result = self.tools.invoke(invocation)
        except ToolError as exc:
            self.store.record_tool_call(run, record, invocation, None, str(exc))
            raise StepFailed(exc.code, str(exc), retryable=not exc.permanent) from None
        self.store.record_tool_call(run, record, invocation, result)
        return result.output

    # -- endings ------------------------------------------------------------------------------

    def _complete(self, run: RunView) -> None:
        events = Events()
        output_schema = run.definition["io_contract"]["output"]["schema"]
        output = plans.extract_output(run.state, output_schema)
        problems = schema_problems(output_schema, output)
        validation = run.definition["governance"]["safety_rails"]["output_validation"]
        if validation.get("enabled") and validation.get("schema"):
            problems += schema_problems(validation["schema"], output)
        if problems:
            run.output = output
            self._fail(
                run,
                VALIDATION_ERROR,
                "the output breaks its schema: " + "; ".join(problems),
                events,
                [],
            )
            return
        run.output = output
        self._finish(run, "COMPLETED", "", "", events, [])

    def _fail(
        self, run: RunView, code: str, message: str, events: Events, steps: list[StepRecord]
    ) -> None:
        self._finish(run, "FAILED", code, message, events, steps)

    def _finish(
        self,
        run: RunView,
        status: str,
        code: str,
        message: str,
        events: Events,
        steps: list[StepRecord],
    ) -> None:
        run.status, run.error_code, run.error_message = status, code, message
        events.add("run.status", status=status, error_code=code, error_message=message)
        parent = self.store.finish(run, steps=steps, events=events)
        if parent is not None:
            self.enqueue(parent)


def schema_problems(schema: dict, value: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path))):
        where = ".".join(str(p) for p in error.absolute_path) or "(input)"
        problems.append(f"{where}: {error.message}")
    return problems


def input_problems(definition: dict, run_input: Any) -> list[str]:
    """io_contract input validation: the schema, then the named validation rules."""
    if not isinstance(run_input, dict):
        return ["the input must be a JSON object"]
    problems = schema_problems(definition["io_contract"]["input"]["schema"], run_input)
    if problems:
        return problems
    from runs.engine.validators import rule_problems

    return rule_problems(definition["io_contract"]["input"]["validation_rules"], run_input)


__all__ = ["Engine", "RunView", "RunStore", "LIMIT_EXCEEDED"]
