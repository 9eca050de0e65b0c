"""Human in the loop: asking a person at a checkpoint, and going on from the decision."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from runs.engine import endings, hitl, start
from runs.engine import plan as plans
from runs.engine.outcomes import Failed, NeedsApproval, OverBudget
from runs.engine.ports import (
    INVALID_INPUT,
    REJECTED,
    TIMEOUT,
    Pause,
    Save,
)
from runs.engine.state import (
    Events,
    RunView,
    StepRecord,
)
from runs.engine.validators import input_problems

if TYPE_CHECKING:
    from runs.engine.core import Engine


@dataclass(frozen=True)
class Question:
    """What a checkpoint asks a person: the request's key, what it is about, what the
    person may decide, and what helps them decide."""

    key: str
    step_name: str
    subject: str
    payload: Any
    edit_schema: dict[str, Any] | None
    reasoning: str
    allowed: tuple[str, ...] = hitl.ALL_DECISIONS
    resume_status: str = "RUNNING"
    risk: list[tuple[str, str]] | None = None
    context: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    alternatives: list[dict[str, Any]] | None = None
    judge: dict[str, Any] | None = None
    confidence: dict[str, Any] | None = None


@dataclass(frozen=True)
class Approved:
    """A tool call that may go ahead: the arguments to call it with (a person may have
    edited them) and who approved it, for the tool's access check (`by`: "timeout" when
    nobody decided in time where that stands; None when nobody was asked)."""

    arguments: dict[str, Any]
    by: str | None = None


def ask_person(
    engine: Engine,
    run: RunView,
    checkpoint: hitl.Checkpoint,
    question: Question,
    *,
    steps: list[StepRecord],
    events: Events,
    awaiting: dict[str, Any] | None = None,
) -> tuple[RunView, hitl.ApprovalVerdict | NeedsApproval | None]:
    """Ask a person, once per checkpoint: the decision when one was taken (the run is
    resuming); None when nobody needs to decide (a notification-only checkpoint); else
    NeedsApproval: the run is persisted PAUSED with `steps` and `events`. `awaiting` marks
    a request the run resumes from (after a failure, an exit, a review) rather than one
    it meets again by replaying the step."""
    verdict = engine.store.signals(run, approval=question.key).verdict
    if verdict is not None:
        if verdict.outcome:
            return run, verdict
        if verdict.status == "NOTIFIED":
            return run, None
    ask = approval_ask(run, checkpoint, question)
    if not checkpoint.approval_required:
        return engine._commit(run, Pause(ask)).run, None
    if awaiting is not None:
        marked = {**awaiting, "key": question.key, "trigger": checkpoint.trigger}
        run = run.with_state(**{hitl.AWAITING_KEY: marked})
    run = run.with_state(**{hitl.REPLAY_KEY: True}).changed(status="PAUSED")
    return engine._commit(run, Pause(ask, steps, events)).run, NeedsApproval()


def approval_ask(run: RunView, checkpoint: hitl.Checkpoint, question: Question) -> hitl.ApprovalAsk:
    """The request as the store keeps it: the question, and where the run stands."""
    plan = run.plan or []
    position = min(run.cursor, len(plan))
    upcoming = plan[position:]
    tools_by_id = {t["tool_id"]: t for t in run.definition["capabilities"]["tools"]}
    impacted_tools = list(question.tools or []) + [
        tools_by_id[s["tool_id"]] for s in upcoming if s.get("tool_id") in tools_by_id
    ]
    snapshot = {
        "entity": run.definition["identity"]["name"],
        "input": hitl.clipped(run.input),
        "state": hitl.clipped(
            {k: v for k, v in (run.state or {}).items() if not k.startswith("_")}
        ),
        "plan": [s["name"] for s in plan],
        "cursor": run.cursor,
        "iteration": run.iteration,
        "attempt": run.attempt,
        **(question.context or {}),
    }
    if question.subject == "plan":
        snapshot["plan_rules"] = hitl.plan_rules(run.definition, question.payload or [])
    return hitl.ApprovalAsk(
        key=question.key,
        trigger=checkpoint.trigger,
        step_name=question.step_name,
        subject=question.subject,
        payload=question.payload,
        edit_schema=question.edit_schema,
        allowed_decisions=question.allowed,
        approval_required=checkpoint.approval_required,
        channels=checkpoint.channels,
        timeout_ms=checkpoint.timeout_ms,
        timeout_action=checkpoint.timeout_action,
        resume_status=question.resume_status,
        requested_by=run.definition["identity"]["name"],
        reasoning_summary=hitl.summary(question.reasoning),
        confidence=question.confidence or {"plan": None, "execution": None, "output": None},
        risk=tuple(question.risk or ()),
        alternatives=tuple(question.alternatives or ()),
        steps_done=sum(1 for s in plan[:position] if s),
        steps_left=len(upcoming),
        downstream_impact={
            "affected_steps": [s["name"] for s in upcoming],
            "reversibility": hitl.reversibility(impacted_tools),
        },
        context_snapshot=snapshot,
        judge=question.judge,
    )


def lock(engine: Engine, run: RunView, verdict: hitl.ApprovalVerdict) -> RunView:
    """A person locked a constraint: it binds the rest of the run and its new children."""
    if verdict.outcome != hitl.LOCK or not verdict.constraint:
        return run
    locked = [*hitl.locked_rules(run.state), verdict.constraint]
    run = run.with_state(**{hitl.LOCKED_KEY: locked})
    run = run.changed(definition=hitl.with_locked(run.definition, run.state))
    return run.noted(
        "constraint.locked", constraint=verdict.constraint["constraint"], by=verdict.decided_by
    )


def refused_by_person(
    engine: Engine,
    run: RunView,
    verdict: hitl.ApprovalVerdict,
    what: str,
    events: Events,
    steps: list[StepRecord],
) -> RunView:
    """A rejection or an ABORT timeout ends the run (REJECTED, TIMEOUT)."""
    if verdict.outcome == hitl.ABORT:
        return endings.fail(
            engine,
            run,
            TIMEOUT,
            f"nobody decided on {what} in time (timeout_action ABORT, or a timeout "
            "after escalating)",
            events,
            steps,
        )
    by = f" by {verdict.decided_by}" if verdict.decided_by else ""
    feedback = f": {verdict.notes}" if verdict.notes else ""
    message = f"{what} was rejected{by}{feedback}"
    return endings.fail(engine, run, REJECTED, message, events, steps)


def before_execution(
    engine: Engine, run: RunView, carried: dict[str, Any], events: Events
) -> tuple[RunView, bool | dict[str, Any]]:
    """The BEFORE_EXECUTION checkpoint: True to go on, a dict (an edited input) to go on
    with, False when the run ended or waits on a person."""
    data = plans.logic_data(run.input, run.input, run.iteration)
    checkpoint = hitl.configured(run.definition, "BEFORE_EXECUTION", data)
    if checkpoint is None:
        return run, True
    name = run.definition["identity"]["name"]
    run, verdict = ask_person(
        engine,
        run,
        checkpoint,
        Question(
            key="BEFORE_EXECUTION",
            step_name="",
            subject="input",
            payload=run.input,
            edit_schema=run.definition["io_contract"]["input"]["schema"],
            reasoning=f"{name} is about to start with this input; its BEFORE_EXECUTION "
            "checkpoint asks a person first.",
            resume_status="PENDING",
            risk=[("low", "nothing has run yet")],
        ),
        steps=[],
        events=Events(),
    )
    if isinstance(verdict, NeedsApproval):
        return run, False
    if verdict is None:
        return run, True
    if verdict.outcome in (hitl.REJECT, hitl.ABORT):
        return refused_by_person(engine, run, verdict, f"starting {name}", events, []), False
    run = lock(engine, run, verdict)
    if verdict.outcome == hitl.EDIT:
        problems = input_problems(run.definition, verdict.payload)
        if problems:
            message = "the edited input: " + "; ".join(problems)
            return endings.fail(engine, run, INVALID_INPUT, message, events, []), False
        return run, dict(verdict.payload)
    return run, True


def after_planning(
    engine: Engine,
    run: RunView,
    plan: list[dict[str, Any]],
    static: list[dict[str, Any]],
    events: Events,
) -> tuple[RunView, list[dict[str, Any]] | None]:
    """The AFTER_PLANNING checkpoint: the plan to run (as planned, or as a person edited
    it); None when the run ended or waits on a person."""
    checkpoint = hitl.configured(run.definition, "AFTER_PLANNING", engine._data(run))
    if checkpoint is None:
        return run, plan
    name = run.definition["identity"]["name"]
    dynamic = run.definition["planning"]["dynamic_planning"].get("enabled")
    alternatives = plan_alternatives(plan, static) if dynamic else []
    run = run.changed(cursor=0)
    run, verdict = ask_person(
        engine,
        run,
        checkpoint,
        Question(
            key=f"AFTER_PLANNING:{run.iteration}",
            step_name="Plan",
            subject="plan",
            payload=plan,
            edit_schema=None,
            reasoning=f"{name} planned {len(plan)} steps: "
            + ", ".join(s["name"] for s in plan)
            + ". Its AFTER_PLANNING checkpoint asks a person to approve or edit the plan.",
            resume_status="PENDING",
            risk=[("medium", "a dynamic plan made by the model")] if dynamic else [],
            alternatives=alternatives,
        ),
        steps=[],
        events=Events(),
    )
    if isinstance(verdict, NeedsApproval):
        return run, None
    if verdict is None:
        return run, plan
    if verdict.outcome in (hitl.REJECT, hitl.ABORT):
        return refused_by_person(engine, run, verdict, f"the plan of {name}", events, []), None
    run = lock(engine, run, verdict)
    if verdict.outcome == hitl.EDIT:
        edited = hitl.normalized_plan(verdict.payload)
        events.add("plan.edited", steps=[s["name"] for s in edited], by=verdict.decided_by)
        return run, edited
    return run, plan


def plan_alternatives(
    plan: list[dict[str, Any]], static: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What a person approving a dynamic plan may compare it with: the static plan."""
    if [s["name"] for s in plan] == [s["name"] for s in static]:
        return []
    return [
        {
            "option": "the static plan: " + ", ".join(s["name"] for s in static),
            "pros": ["designed ahead of time"],
            "cons": ["does not adapt to this input"],
            "confidence": None,
        },
        {
            "option": "the reconciled plan: " + ", ".join(s["name"] for s in plan),
            "pros": ["adapted to this input by the model"],
            "cons": ["departs from the designed plan"],
            "confidence": None,
        },
    ]


def custom_checkpoints(engine: Engine, run: RunView, position: int) -> tuple[RunView, bool]:
    """CUSTOM_CONDITION checkpoints before a step: False when the run paused or ended."""
    customs = hitl.custom_checkpoints(run.definition)
    if not customs:
        return run, True
    step = run.planned()[position]
    data = engine._data(run)
    for index, config in customs:
        if not plans.holds(config["condition"], data):
            continue
        checkpoint = hitl.configured(
            {"governance": {"human_oversight": {"hitl_checkpoints": [config]}}},
            "CUSTOM_CONDITION",
            data,
        )
        if checkpoint is None:  # its condition holds: never
            continue
        run, verdict = ask_person(
            engine,
            run,
            checkpoint,
            Question(
                key=f"CUSTOM:{index}:{step['key']}:{run.iteration}:{run.attempt}",
                step_name=step["name"],
                subject="state",
                payload={k: v for k, v in run.state.items() if not k.startswith("_")},
                edit_schema={"type": "object"},
                reasoning=f"before step {step['name']!r}: the condition of a CUSTOM_CONDITION "
                "checkpoint holds against the run's state, so a person decides whether it "
                "goes on.",
                risk=[("medium", "a custom condition of the entity's governance holds")],
                context={"condition": config["condition"]},
            ),
            steps=[],
            events=Events(),
        )
        if isinstance(verdict, NeedsApproval):
            return run, False
        if verdict is None:
            continue
        if verdict.outcome in (hitl.REJECT, hitl.ABORT):
            what = f"step {step['name']!r}"
            return refused_by_person(engine, run, verdict, what, Events(), []), False
        run = lock(engine, run, verdict)
        if verdict.outcome == hitl.EDIT:
            run = run.with_state(**verdict.payload)
    return run, True


def spawn_checkpoint(engine: Engine, run: RunView, group: list[int]) -> tuple[RunView, bool]:
    """The SUBAGENT_SPAWN checkpoint (seed 002) before a group that hires subordinates
    (DELEGATE steps, runs/engine/hiring.py): a person approves the hires or rejects them
    (the run ends). False when the run paused or ended."""
    hires = [run.planned()[i] for i in group if run.planned()[i]["type"] == plans.DELEGATE]
    if not hires:
        return run, True
    proposed = [
        {
            "step": step["name"],
            "template": step.get("target_entity"),
            **{k: v for k, v in (step.get("hire") or {}).items()},
        }
        for step in hires
    ]
    step = hires[0]
    key = f"SUBAGENT_SPAWN:{step['key']}:{run.iteration}:{run.attempt}"
    run, verdict = hire_question(engine, run, step["name"], key, proposed)
    if isinstance(verdict, NeedsApproval):
        return run, False
    if verdict is not None and verdict.outcome in (hitl.REJECT, hitl.ABORT):
        what = f"the hire of step {step['name']!r}"
        return refused_by_person(engine, run, verdict, what, Events(), []), False
    return run, True


def hire_question(
    engine: Engine,
    run: RunView,
    step_name: str,
    key: str,
    proposed: list[dict[str, Any]],
    rejecting: str = "end the run",
) -> tuple[RunView, hitl.ApprovalVerdict | NeedsApproval | None]:
    """The SUBAGENT_SPAWN checkpoint (seed 002) for the hires `proposed` (a DELEGATE group's
    or a reasoning loop's turn): None when the definition asks no one, else the person's
    verdict, or NeedsApproval while it is awaited."""
    data = {**engine._data(run), "hires": proposed}
    checkpoint = hitl.configured(run.definition, "SUBAGENT_SPAWN", data)
    if checkpoint is None:
        return run, None
    return ask_person(
        engine,
        run,
        checkpoint,
        Question(
            key=key,
            step_name=step_name,
            subject="hire",
            payload=proposed,
            edit_schema=None,
            reasoning=f"step {step_name!r} hires {len(proposed)} subordinate(s); the "
            f"SUBAGENT_SPAWN checkpoint asks a person first. Approve to hire, reject to "
            f"{rejecting}.",
            allowed=(hitl.APPROVE, hitl.REJECT),
            risk=[("medium", "a subordinate is hired with a budget taken from this run's")],
        ),
        steps=[],
        events=Events(),
    )


def tool_approval(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    tool: dict[str, Any],
    arguments: dict[str, Any],
    record: StepRecord,
    index: int | None = None,
) -> tuple[RunView, Approved | Failed | NeedsApproval]:
    """Before a tool call: the BEFORE_TOOL_CALL checkpoint, an action restriction that
    requires approval, an EXECUTE tool the run's starter has no grant for. One request
    covers them all. Answers the call Approved (with the arguments to call with), Failed
    (REJECTED, TIMEOUT) when a person said no, or NeedsApproval. `index`: the call's place
    among a step's several calls (a reasoning loop's), in the request's key."""
    checkpoint, reasons, risk = tool_checkpoint(engine, run, tool, arguments)
    if checkpoint is None:
        return run, Approved(arguments)
    function = tool.get("function_schema") or {}
    key = f"TOOL:{record.key}:{record.iteration}:{record.attempt}"
    run, verdict = ask_person(
        engine,
        run,
        checkpoint,
        Question(
            key=key if index is None else f"{key}:{index}",
            step_name=step["name"],
            subject="tool_arguments",
            payload=arguments,
            edit_schema=function.get("parameters") or {"type": "object"},
            reasoning=f"{run.definition['identity']['name']} wants to call "
            f"{function.get('name') or tool['tool_id']} in step {step['name']!r}: "
            + "; ".join(reasons),
            risk=risk,
            tools=[tool],
            context={
                "tool": {
                    "tool_id": tool["tool_id"],
                    "name": function.get("name") or tool["tool_id"],
                    "description": function.get("description", ""),
                    "permissions": tool.get("permissions") or "READ",
                },
                "arguments": arguments,
            },
        ),
        steps=[record.waiting()],
        events=Events(),
    )
    if verdict is None:
        return run, Approved(arguments)
    if isinstance(verdict, NeedsApproval):
        return run, verdict
    if verdict.outcome == hitl.PROCEED and checkpoint.trigger != "BEFORE_TOOL_CALL":
        # A timeout never stands in for a person where a person is required.
        verdict = replace(verdict, outcome=hitl.ABORT)
    if verdict.outcome in (hitl.REJECT, hitl.ABORT):
        return run, refused_call(verdict, tool)
    run = lock(engine, run, verdict)
    by = verdict.decided_by or "timeout"
    if verdict.outcome == hitl.EDIT:
        run = run.noted("tool.arguments_edited", step=step["name"], by=verdict.decided_by)
        return run, Approved(dict(verdict.payload), by)
    return run, Approved(arguments, by)


def refused_call(verdict: hitl.ApprovalVerdict, tool: dict[str, Any]) -> Failed:
    """A tool call a person rejected (REJECTED), or nobody decided on in time (TIMEOUT)."""
    code = REJECTED if verdict.outcome == hitl.REJECT else TIMEOUT
    by = f" by {verdict.decided_by}" if verdict.decided_by else ""
    what = "rejected" + by if code == REJECTED else "not decided in time"
    feedback = f": {verdict.notes}" if verdict.notes else ""
    return Failed(code, f"the call of {tool['tool_id']} was {what}{feedback}")


def tool_checkpoint(
    engine: Engine, run: RunView, tool: dict[str, Any], arguments: dict[str, Any]
) -> tuple[hitl.Checkpoint | None, list[str], list[tuple[str, str]]]:
    """Which checkpoint a tool call meets (None: none), why, and its risks."""
    data = {**engine._data(run), "tool": {"tool_id": tool["tool_id"], "arguments": arguments}}
    checkpoint = hitl.configured(run.definition, "BEFORE_TOOL_CALL", data)
    risk: list[tuple[str, str]] = []
    permission = tool.get("permissions") or "READ"
    if permission == "WRITE":
        risk.append(("medium", f"{tool['tool_id']} writes (WRITE permission)"))
    elif permission == "EXECUTE":
        risk.append(("high", f"{tool['tool_id']} executes actions (EXECUTE permission)"))
    reasons = []
    if checkpoint is not None:
        reasons.append("the BEFORE_TOOL_CALL checkpoint asks a person before tool calls")
    rails = run.definition["governance"]["safety_rails"]
    for restriction in rails.get("action_restrictions") or []:
        if restriction["restricted_action"] not in (tool["tool_id"], f"tool:{tool['tool_id']}"):
            continue
        if restriction.get("requires_approval", True) and not restriction.get("blocked_entirely"):
            reasons.append("an action restriction requires a person's approval")
            risk.append(("high", f"{tool['tool_id']} is a restricted action"))
            if checkpoint is None or not checkpoint.approval_required:
                checkpoint = hitl.default_checkpoint(
                    run.definition, "ACTION_RESTRICTION", reasons[-1]
                )
    needs = getattr(engine.tools, "needs_approval", None)
    lacking = needs(tool, run.workspace_id, run.created_by_id) if needs else None
    if lacking:
        reasons.append(lacking)
        risk.append(("high", f"no standing grant for {tool['tool_id']} (EXECUTE)"))
        if checkpoint is None or not checkpoint.approval_required:
            checkpoint = hitl.default_checkpoint(run.definition, "TOOL_GRANT", lacking)
    return checkpoint, reasons, risk


def on_failure_checkpoint(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    position: int,
    code: str,
    message: str,
    events: Events,
    steps: list[StepRecord],
) -> tuple[RunView, NeedsApproval | None]:
    """The ON_FAILURE checkpoint: NeedsApproval when the run now waits on a person (who
    may try the step again, give its output, or let it fail); None to fail as usual."""
    if code in (REJECTED, "CANCELLED", TIMEOUT):
        return run, None  # a person already said no, or the run is over anyway
    data = {**engine._data(run), "error": {"code": code, "message": message}}
    checkpoint = hitl.configured(run.definition, "ON_FAILURE", data)
    if checkpoint is None:
        return run, None
    schema = None
    if step["type"] == "THOUGHT":
        schema = run.definition["io_contract"]["output"]["schema"]
    elif step["type"] in plans.STARTS_A_RUN:
        child = engine.store.definitions(run, [step["target_entity"]]).get(step["target_entity"])
        schema = child["io_contract"]["output"]["schema"] if child else None
    run, asked = ask_person(
        engine,
        run,
        checkpoint,
        Question(
            key=f"ON_FAILURE:{step['key']}:{run.iteration}:{run.attempt}",
            step_name=step["name"],
            subject="failure",
            payload={"error": {"code": code, "message": message}},
            edit_schema=schema,
            reasoning=f"step {step['name']!r} failed ({code}): {message}. Approve to try it "
            "again, edit to give its output, reject to let the run fail.",
            risk=[("medium", f"step {step['name']!r} failed with {code}")],
            context={"error": {"code": code, "message": message}},
        ),
        steps=steps,
        events=events,
        awaiting={"position": position, "code": code, "message": message},
    )
    # Otherwise a notification only: the failure stands.
    return run, asked if isinstance(asked, NeedsApproval) else None


def resume_decision(engine: Engine, run: RunView) -> tuple[RunView, bool]:
    """Go on from a request the run waited on (after a failure, an ESCALATE exit, a
    review): False when the run paused again or ended."""
    awaiting = run.state[hitl.AWAITING_KEY]
    verdict = engine.store.signals(run, approval=awaiting["key"]).verdict
    if verdict is None or not verdict.outcome:
        return engine._commit(run.changed(status="PAUSED"), Save([], Events())).run, False
    run = run.without_state(hitl.AWAITING_KEY).changed(status="RUNNING")
    trigger = awaiting["trigger"]
    events = Events()
    run = lock(engine, run, verdict)
    if trigger == "REVIEW_ESCALATE":
        return endings.after_review_decision(engine, run, verdict, events)
    position = awaiting["position"]
    step = run.planned()[position]
    if verdict.outcome in (hitl.REJECT, hitl.ABORT):
        return rejected_step(engine, run, verdict, awaiting, events)
    if trigger == "ON_FAILURE":
        return after_failure_decision(engine, run, verdict, awaiting, events)
    # EXIT_ESCALATE: go on past the exit; an edit replaces the step's output first.
    if verdict.outcome == hitl.EDIT:
        run = engine._new_state(run, step, verdict.payload, events)
    return engine._commit(run.at(position + 1), Save([], events)).run, True


def rejected_step(
    engine: Engine,
    run: RunView,
    verdict: hitl.ApprovalVerdict,
    awaiting: dict[str, Any],
    events: Events,
) -> tuple[RunView, bool]:
    """A person rejected (or nobody decided on) a step the run waited at: the failure
    stands (ON_FAILURE, ABORT), the run re-plans (ALTERNATIVE_PATH), or it fails."""
    step = run.planned()[awaiting["position"]]
    if awaiting["trigger"] == "ON_FAILURE" and verdict.outcome == hitl.ABORT:
        return endings.fail(engine, run, awaiting["code"], awaiting["message"], events, []), False
    run, replanned = rejected_replan(engine, run, verdict, step["name"], events)
    if isinstance(replanned, OverBudget):
        return endings.limit_reached(engine, run, replanned.limit), False
    if replanned:
        return run, True
    return refused_by_person(engine, run, verdict, f"step {step['name']!r}", events, []), False


def after_failure_decision(
    engine: Engine,
    run: RunView,
    verdict: hitl.ApprovalVerdict,
    awaiting: dict[str, Any],
    events: Events,
) -> tuple[RunView, bool]:
    """A person decided on a failed step (ON_FAILURE): approve tries it again, edit gives
    its output, PROCEED (nobody decided) lets the failure stand. False when the run
    stopped."""
    position = awaiting["position"]
    step = run.planned()[position]
    if verdict.outcome == hitl.PROCEED:  # nobody decided: the failure stands
        return endings.fail(engine, run, awaiting["code"], awaiting["message"], events, []), False
    if verdict.outcome == hitl.EDIT:
        record = StepRecord(
            step["key"],
            position,
            step["name"],
            step["type"],
            "COMPLETED",
            run.iteration,
            attempt=run.attempt,
            output=verdict.payload,
        )
        run = engine._new_state(run, step, verdict.payload, events)
        events.add("step.finished", step=step["name"], status="COMPLETED", by="person")
        run = engine._go_on(run, step, position, events, [record])
        return run, run.status == "RUNNING"
    run = run.at(position, attempt=run.attempt + 1)  # approve: another attempt of the step
    events.add("step.retry", step=step["name"], attempt=run.attempt, by="person")
    return engine._commit(run, Save([], events)).run, True


def rejected_replan(
    engine: Engine, run: RunView, verdict: hitl.ApprovalVerdict, what: str, events: Events
) -> tuple[RunView, bool | OverBudget]:
    """An entity that takes ALTERNATIVE_PATH (its review's on_failure, with dynamic
    planning) re-plans after a rejection, with the feedback; True when it did, OverBudget
    when there was no room for the planning call."""
    if verdict.outcome != hitl.REJECT or not start.takes_alternative_path(run):
        return run, False
    feedback = f"A person rejected {what}" + (f": {verdict.notes}" if verdict.notes else "")
    return start.replan(engine, run, feedback, events)
