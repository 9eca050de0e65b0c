"""A run's first entry: runtime validation, the BEFORE_EXECUTION checkpoint, planning (and
re-planning after a rejection or a failed review)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from runs.engine import (
    checkpoints,
    children,
    endings,
    hiring,
    hitl,
    limits,
    planning,
    thoughts,
)
from runs.engine import plan as plans
from runs.engine.outcomes import Failed, OverBudget
from runs.engine.ports import (
    INVALID_INPUT,
    NOT_ACTIVE,
    VALIDATION_ERROR,
)
from runs.engine.state import (
    Events,
    RunView,
    StepRecord,
)
from runs.engine.validators import input_problems

if TYPE_CHECKING:
    from runs.engine.core import Engine


# What a run's state keeps of what it was started with: what it inherits, and (a hired
# subordinate) its role and task (runs/engine/hiring.py) and what it holds of its
# workspace's monthly cost quota (given back when it ends: runs/engine/limits.py).
STARTS_WITH = (*hitl.CARRIED_KEYS, hiring.ROLE_KEY, hiring.TASK_KEY, limits.QUOTA_HELD_KEY)


def start_run(engine: Engine, run: RunView) -> tuple[RunView, bool]:
    """The run's first entry: validated, past BEFORE_EXECUTION, RUNNING with its plan;
    False when it ended or waits on a person."""
    events = Events()
    began_at = engine.clock.now()
    run = run.changed(began_at=began_at)
    refused = runtime_problem(run)
    if refused is not None:
        return endings.fail(engine, run, refused.code, refused.message, events, []), False
    timeout_ms = run.definition["governance"]["execution_limits"]["timeout_ms"]
    own = began_at + timedelta(milliseconds=timeout_ms)
    run = run.changed(deadline=own if run.deadline is None else min(run.deadline, own))
    carried = {k: run.state[k] for k in STARTS_WITH if k in (run.state or {})}
    start_state = dict(run.input)
    run, verdict = checkpoints.before_execution(engine, run, carried, events)
    if verdict is False:
        return run, False
    if isinstance(verdict, dict):
        start_state = verdict  # a person edited the input
    carried = {k: run.state[k] for k in STARTS_WITH if k in (run.state or {})}
    names = children.child_names(engine, run)
    static = plans.build_static_plan(run.definition, names)
    run = run.changed(state={**start_state, **carried}, status="RUNNING", cursor=0)
    events.add("run.status", status="RUNNING")
    run, planned = plan_pass(engine, run, static, names, events, feedback="")
    if isinstance(planned, OverBudget):
        return endings.limit_reached(engine, run, planned.limit), False
    if planned is None:
        return run, False
    run, plan = checkpoints.after_planning(engine, run, planned, static, events)
    if plan is None:
        return run, False
    run = run.changed(plan=plan)
    events.add("plan.ready", steps=[s["name"] for s in plan])
    # Written with the next write of this run: replaying a start is deterministic.
    return engine._later(run, [], events), True


# What a trial may run besides ACTIVE entities: a draft being designed, and a deprecated one
# being checked; never an archived one.
TRIABLE = ("DRAFT", "DEPRECATED")


def runtime_problem(run: RunView) -> Failed | None:
    """Runtime validation at the first entry (seed 000 §9.2): an ACTIVE entity, a valid
    input, an implementation for every tool."""
    if run.entity_status != "ACTIVE" and not (run.trial and run.entity_status in TRIABLE):
        return Failed(
            NOT_ACTIVE,
            f"{run.definition['identity']['name']} is {run.entity_status}; only ACTIVE "
            "entities run",
        )
    problems = input_problems(run.definition, run.input)
    if problems:
        return Failed(INVALID_INPUT, "; ".join(problems))
    missing = [
        tool["tool_id"]
        for tool in run.definition["capabilities"]["tools"]
        if not tool.get("implementation")
    ]
    if missing:
        return Failed(
            VALIDATION_ERROR, "tools without an implementation cannot run: " + ", ".join(missing)
        )
    return None


def plan_pass(
    engine: Engine,
    run: RunView,
    static: list[dict[str, Any]],
    names: dict[str, str],
    events: Events,
    *,
    feedback: str,
) -> tuple[RunView, list[dict[str, Any]] | OverBudget | None]:
    """The plan of this pass: the static plan, or the model's plan reconciled with it.
    A rejected dynamic plan or a failed planning call ends the run; None then. OverBudget:
    no room for the planning call (the caller ends the run or blocks it)."""
    if not run.definition["planning"]["dynamic_planning"].get("enabled"):
        return run, static
    record = StepRecord(
        f"plan#{run.attempt}" if feedback else "plan",
        0,
        "Plan",
        "PLAN",
        "COMPLETED",
        run.iteration,
    )
    request = planning.planning_request(
        run.definition,
        child_names=names,
        static=static,
        run_input=run.input,
        request_factory=lambda **kw: thoughts.model_request(engine, run, **kw),
        context={"state": run.state} if feedback else None,
        feedback=feedback,
    )
    run, reply = thoughts.call_model(engine, run, record, request)
    if isinstance(reply, OverBudget):
        return run, reply
    if isinstance(reply, Failed):
        record = record.failed(reply.code, reply.message)
        message = f"planning: {reply.message}"
        return endings.fail(engine, run, reply.code, message, events, [record]), None
    proposed = planning.parse_dynamic_plan(reply, run.definition, names)
    if isinstance(proposed, planning.PlanRejected):
        record = record.failed(VALIDATION_ERROR, proposed.message)
        message = proposed.message
        return endings.fail(engine, run, VALIDATION_ERROR, message, events, [record]), None
    plan, notes = planning.reconcile_for(run.definition, static, proposed)
    record = record.completed({"proposed": [s["name"] for s in proposed], "notes": notes})
    events.add("plan.reconciled", notes=notes, steps=[s["name"] for s in plan])
    return engine._later(run, [record], Events()), plan


def replan(
    engine: Engine, run: RunView, feedback: str, events: Events
) -> tuple[RunView, bool | OverBudget]:
    """Plan again with the feedback and start a new pass; False when planning ended the
    run, OverBudget when there was no room for the planning call."""
    names = children.child_names(engine, run)
    static = plans.build_static_plan(run.definition, names)
    run = run.changed(attempt=run.attempt + 1)
    run, plan = plan_pass(engine, run, static, names, Events(), feedback=feedback)
    if plan is None or isinstance(plan, OverBudget):
        return run, plan or False
    run = run.changed(plan=plan).with_state(review_feedback=feedback)
    events.add("plan.replanned", reason=feedback)
    return endings.next_pass(engine, run, events), True


def takes_alternative_path(run: RunView) -> bool:
    definition = run.definition
    return definition["logic_gate"]["review_mechanism"].get(
        "on_failure"
    ) == "ALTERNATIVE_PATH" and bool(definition["planning"]["dynamic_planning"].get("enabled"))
