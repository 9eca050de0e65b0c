"""The end of a pass and of a run: output, review, convergence, and the run's terminal writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runs.engine import (
    checkpoints,
    children,
    hitl,
    loop,
    memory,
    retry,
    review,
    start,
    summaries,
    thoughts,
    transforms,
)
from runs.engine import plan as plans
from runs.engine.limits import (
    BUDGET_EXHAUSTED,
    LimitReached,
)
from runs.engine.outcomes import OverBudget, RetryAt
from runs.engine.ports import (
    LIMIT_EXCEEDED,
    MAX_PASSES_EXHAUSTED,
    TIMEOUT,
    VALIDATION_ERROR,
    Finish,
    JudgeVerdict,
    Save,
)
from runs.engine.state import (
    HISTORY_KEY,
    RESTART_AT_KEY,
    REVIEW_RETRIES_KEY,
    Events,
    RunView,
    StepRecord,
)
from runs.engine.thoughts import RecordingModel
from runs.engine.validators import schema_problems

if TYPE_CHECKING:
    from runs.engine.core import Engine


def complete(engine: Engine, run: RunView) -> tuple[RunView, bool]:
    """The end of a pass: output, transformations, validation, review, convergence.
    True when another pass starts."""
    events = Events()
    definition = run.definition
    output_schema = definition["io_contract"]["output"]["schema"]
    output = plans.extract_output(run.state, output_schema)
    output, problems = transforms.apply_transformations(
        output, definition["io_contract"]["output"]["transformations"]
    )
    run = run.changed(output=output)
    if problems:
        message = "output transformations failed: " + "; ".join(problems)
        return fail(engine, run, VALIDATION_ERROR, message, events, []), False
    problems = schema_problems(output_schema, output)
    validation = definition["governance"]["safety_rails"]["output_validation"]
    validation_schema = validation.get("schema")
    if validation.get("enabled") and validation_schema:
        problems += schema_problems(validation_schema, output)
    if problems:
        message = "the output breaks its schema: " + "; ".join(problems)
        return fail(engine, run, VALIDATION_ERROR, message, events, []), False
    run, verdict = run_review(engine, run, output, events)
    if verdict != "passed":
        return run, verdict == "again"
    return after_review(engine, run, output, events)


def after_review(
    engine: Engine, run: RunView, output: dict[str, Any], events: Events
) -> tuple[RunView, bool]:
    """Convergence, memory, the end: True when another pass starts."""
    loop_control = run.definition["planning"]["loop_control"]
    criteria = loop_control.get("convergence_criteria") or []
    history = run.state.get(HISTORY_KEY, [])
    run = run.with_state(**{HISTORY_KEY: [*history, output]})
    if criteria and not loop.converged(criteria, run.state):
        unmet = loop.unmet(criteria, run.state)
        if not passes_left(engine, run):
            reason = "its convergence criteria were not met: " + "; ".join(unmet)
            return exhausted(engine, run, output, 0, reason, events, [])
        events.add("loop.next", iteration=run.iteration + 1, unmet=unmet)
        return next_pass(engine, run, events), True
    return completed(engine, run, output, events, [])


def completed(
    engine: Engine, run: RunView, output: dict[str, Any], events: Events, steps: list[StepRecord]
) -> tuple[RunView, bool]:
    """The run ends COMPLETED with `output`, remembered where the entity keeps memory (the
    memory's oldest items folded into a summary past its threshold: summaries.remember)."""
    run = run.changed(output=output)
    run = summaries.remember(engine, run, {"input": run.input, "output": output})
    return finish(engine, run, "COMPLETED", "", "", events, steps), False


def next_pass(engine: Engine, run: RunView, events: Events) -> RunView:
    """Another pass of the plan, from its first step."""
    run = run.changed(iteration=run.iteration + 1, cursor=0, attempt=1)
    return engine._commit(run, Save([], events)).run


def passes_left(engine: Engine, run: RunView) -> bool:
    """Whether another pass may follow this one: the loop's max_iterations under the hard
    cap, plus what a person gave the run when it ran out."""
    return loop.next_iteration_allowed(
        run.iteration,
        run.definition["planning"]["loop_control"].get("max_iterations"),
        engine.hard_cap,
        run.passes_granted,
    )


def jump_back(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    target: int,
    events: Events,
    steps: list[StepRecord],
) -> RunView:
    """An exit condition of `step` jumps back to the step at `target` (or to itself): the
    next pass of the plan starts there, its iteration one more, so the loop's context mode
    and its max_iterations apply as to any pass; when the passes have run out, the loop's
    `on_exhausted` says what becomes of the run."""
    to = run.planned()[target]["name"]
    events.add("step.exit", step=step["name"], to=to)
    output = plans.extract_output(run.state, run.definition["io_contract"]["output"]["schema"])
    run = run.with_state(**{HISTORY_KEY: [*run.state.get(HISTORY_KEY, []), output]})
    if not passes_left(engine, run):
        reason = f"step {step['name']!r} still jumps back to {to!r}"
        return exhausted(engine, run, output, target, reason, events, steps)[0]
    events.add("loop.next", iteration=run.iteration + 1, jump_from=step["name"], to=to)
    run = run.changed(iteration=run.iteration + 1, cursor=target, attempt=1)
    return engine._commit(run, Save(steps, events)).run


def exhausted(
    engine: Engine,
    run: RunView,
    output: dict[str, Any],
    restart_at: int,
    reason: str,
    events: Events,
    steps: list[StepRecord],
) -> tuple[RunView, bool]:
    """The passes ran out before the loop was done. As `loop_control.on_exhausted` says: the
    run waits BLOCKED (MAX_PASSES_EXHAUSTED, the last pass's output kept) until a person
    gives it more passes (the next pass then starts at `restart_at`), ends COMPLETED with
    the last pass's output, or FAILS."""
    limit = loop.iteration_limit(
        run.definition["planning"]["loop_control"].get("max_iterations"),
        engine.hard_cap,
        run.passes_granted,
    )
    on_exhausted = run.definition["planning"]["loop_control"].get("on_exhausted", "BLOCK")
    message = f"max_passes_exhausted: {run.iteration} of {limit} passes ran and {reason}"
    events.add(
        "loop.stopped", iteration=run.iteration, reason="max_passes_exhausted", then=on_exhausted
    )
    if on_exhausted == "COMPLETE":
        return completed(engine, run, output, events, steps)
    run = run.changed(output=output)
    if on_exhausted == "FAIL":
        return fail(engine, run, MAX_PASSES_EXHAUSTED, message, events, steps), False
    run = run.with_state(**{RESTART_AT_KEY: restart_at}).ended(
        "BLOCKED", MAX_PASSES_EXHAUSTED, message
    )
    events.add("run.status", status="BLOCKED", reason="max_passes_exhausted", message=message)
    return engine._commit(run, Save(steps, events)).run, False


def resume_pass(run: RunView) -> RunView:
    """A run given more passes after it ran out: its next pass starts where the loop
    would have gone on."""
    restart_at = int(run.state.get(RESTART_AT_KEY) or 0)
    run = run.without_state(RESTART_AT_KEY)
    return run.changed(iteration=run.iteration + 1, cursor=restart_at, attempt=1)


def run_review(
    engine: Engine, run: RunView, output: dict[str, Any], events: Events
) -> tuple[RunView, str]:
    """Run the review mechanism on the output (scope OUTPUT): "passed", "again" (another
    pass starts) or "stop" (the run failed, waits for a retry, or waits for a human)."""
    mechanism = run.definition["logic_gate"]["review_mechanism"]
    if not mechanism.get("enabled") or mechanism.get("scope", "OUTPUT") != "OUTPUT":
        return run, "passed"  # no review, or each step's result was reviewed instead
    record = StepRecord(
        "review",
        len(run.plan or []),
        "Review",
        "REVIEW",
        "RUNNING",
        run.iteration,
        attempt=run.attempt,
    )
    run, result, record = reviewed(engine, run, output, record, "review")
    if isinstance(result, LimitReached):  # a judge's call had no room
        return limit_reached(engine, run, result), "stop"
    if result.human_review or (not result.passed and mechanism["on_failure"] == "ESCALATE"):
        record = record.waiting(result.detail)
        events.add("review.escalated", detail=result.detail)
        return review_to_person(engine, run, output, result, record, events), "stop"
    if result.passed:
        record = record.changed(status="COMPLETED")
        events.add("review.passed", criteria=list(result.passed_criteria))
        return engine._later(run, [record], Events()), "passed"
    return review_failed(engine, run, result, record, events)


def reviewed(
    engine: Engine, run: RunView, output: Any, record: StepRecord, verdicts_at: str
) -> tuple[RunView, review.ReviewResult | LimitReached, StepRecord]:
    """The review mechanism's verdict on `output` (the run's output, or a step's result),
    its judges' calls recorded under `record` and each judge's verdict kept under
    `<verdicts_at>:<iteration>:<attempt>:<n>`; the record with the verdict as its output.
    LimitReached when a judge's call had no room (the run as its last record wrote it)."""
    model = RecordingModel(engine, run, record)
    try:
        result = review.review(
            output,
            run.definition["logic_gate"]["review_mechanism"],
            model=model,
            request_factory=lambda **kw: thoughts.model_request(engine, run, **kw),
        )
    except LimitReached as limit:
        return model.run, limit, record
    run = model.run
    record = record.changed(
        output={
            "passed": result.passed,
            "detail": result.detail,
            "judge": result.judge,
            "passed_criteria": list(result.passed_criteria),
        }
    )
    for index, (criterion, judged) in enumerate(result.verdicts):
        key = f"{verdicts_at}:{run.iteration}:{run.attempt}:{index}"
        run = engine._record(run, JudgeVerdict(key, {**judged, "criterion": criterion}))
    return run, result, record


def review_failed(
    engine: Engine,
    run: RunView,
    result: review.ReviewResult,
    record: StepRecord,
    events: Events,
) -> tuple[RunView, str]:
    """A failed review: a judge that failed goes by the retry policy; a failed output by
    the mechanism's on_failure (another pass, re-planned under ALTERNATIVE_PATH, or FAIL)."""
    mechanism = run.definition["logic_gate"]["review_mechanism"]
    record = record.failed(result.error_code or VALIDATION_ERROR, result.detail)
    events.add("review.failed", detail=result.detail, on_failure=mechanism["on_failure"])
    if result.error_code:  # the judge itself failed: the retry policy decides
        policy = run.definition["logic_gate"]["retry_policy"]
        decision = retry.decide(result.error_code, result.retryable, run.attempt, policy)
        if isinstance(decision, retry.Retry):
            run = run.changed(attempt=decision.attempt)
            return engine._schedule(run, RetryAt(decision.delay_s), [record], events), "stop"
        message = f"review: {result.detail}"
        return fail(engine, run, result.error_code, message, events, [record]), "stop"
    on_failure = mechanism["on_failure"]
    retries = int(run.state.get(REVIEW_RETRIES_KEY, 0))
    limit = run.definition["logic_gate"]["retry_policy"]["max_retries"]
    if on_failure in ("RETRY", "ALTERNATIVE_PATH") and retries < limit:
        run = run.with_state(**{REVIEW_RETRIES_KEY: retries + 1, "review_feedback": result.detail})
        run = engine._later(run, [record], events)
        if on_failure == "ALTERNATIVE_PATH":
            return another_plan(engine, run, result)
        return next_pass(engine, run, Events()), "again"
    message = f"the output failed its review: {result.detail}"
    if on_failure in ("RETRY", "ALTERNATIVE_PATH"):
        message += f" (after {retries} retries)"
    return fail(engine, run, VALIDATION_ERROR, message, events, [record]), "stop"


def another_plan(engine: Engine, run: RunView, result: review.ReviewResult) -> tuple[RunView, str]:
    """A failed review under ALTERNATIVE_PATH: plan again with its feedback, then another
    pass ("again"); "stop" when planning ended the run or had no room."""
    names = children.child_names(engine, run)
    static = plans.build_static_plan(run.definition, names)
    run, plan = start.plan_pass(
        engine,
        run,
        static,
        names,
        Events(),
        feedback=f"The last attempt failed its review: {result.detail}",
    )
    if isinstance(plan, OverBudget):
        return limit_reached(engine, run, plan.limit), "stop"
    if plan is None:
        return run, "stop"
    return next_pass(engine, run.changed(plan=plan), Events()), "again"


def review_to_person(
    engine: Engine,
    run: RunView,
    output: dict[str, Any],
    result: review.ReviewResult,
    record: StepRecord,
    events: Events,
) -> RunView:
    """The review sends the output to a person: a failure under on_failure ESCALATE, or
    a judge that routed it to human review or was not confident enough."""
    judge = result.judge
    trigger = "REVIEW_ESCALATE"
    reason = (
        result.detail if result.human_review else "the review failed and on_failure is ESCALATE"
    )
    checkpoint = hitl.default_checkpoint(run.definition, trigger, reason)
    risk: list[tuple[str, str]] = [("medium", f"review: {result.detail}")]
    for flag in (judge or {}).get("risk_flags") or []:
        risk.append(("medium", f"judge flag: {flag}"))
    confidence: dict[str, int | None] = {"plan": None, "execution": None, "output": None}
    if judge is not None:
        confidence["output"] = round(float(judge["confidence"]) * 100)
    run, _ = checkpoints.ask_person(
        engine,
        run,
        checkpoint,
        checkpoints.Question(
            key=f"REVIEW:{run.iteration}:{run.attempt}",
            step_name="Review",
            subject="output",
            payload=output,
            edit_schema=run.definition["io_contract"]["output"]["schema"],
            reasoning=f"{run.definition['identity']['name']}'s output needs a person: {reason}"
            + ("" if result.human_review else f". {result.detail}"),
            risk=risk,
            judge=judge,
            confidence=confidence,
            context={"review": result.detail},
        ),
        steps=[record],
        events=events,
        awaiting={},
    )
    return run


def after_review_decision(
    engine: Engine, run: RunView, verdict: hitl.ApprovalVerdict, events: Events
) -> tuple[RunView, bool]:
    """A person decided on an output the review sent them: approve (or PROCEED) keeps
    it, edit replaces it, reject re-plans (ALTERNATIVE_PATH) or fails."""
    name = run.definition["identity"]["name"]
    if verdict.outcome in (hitl.REJECT, hitl.ABORT):
        what = f"the output of {name}"
        run, replanned = checkpoints.rejected_replan(engine, run, verdict, what, events)
        if isinstance(replanned, OverBudget):
            return limit_reached(engine, run, replanned.limit), False
        if replanned:
            return run, True
        return checkpoints.refused_by_person(engine, run, verdict, what, events, []), False
    output = run.output or {}
    if verdict.outcome == hitl.EDIT:
        output = verdict.payload
        problems = schema_problems(run.definition["io_contract"]["output"]["schema"], output)
        run = run.changed(output=output)
        if problems:
            message = "the edited output: " + "; ".join(problems)
            return fail(engine, run, VALIDATION_ERROR, message, events, []), False
        events.add("output.edited", by=verdict.decided_by)
    events.add("review.passed", by=verdict.decided_by or "timeout")
    return after_review(engine, run, output, events)


def expired(engine: Engine, run: RunView) -> bool:
    """Past the deadline, unless someone in the trace waits on a person: that time does
    not count (the decision moves the trace's deadlines by the time waited)."""
    if run.deadline is None or engine.clock.now() <= run.deadline:
        return False
    return not engine.store.signals(run, person=True).awaiting_person


def timeout(engine: Engine, run: RunView) -> RunView:
    """Past the deadline: the run ends TIMEOUT and its unfinished descendants stop."""
    timeout_ms = run.definition["governance"]["execution_limits"]["timeout_ms"]
    steps = unfinished_steps(
        engine, run, "FAILED", error_code=TIMEOUT, error_message="the run passed its deadline"
    )
    return finish(
        engine,
        run,
        "FAILED",
        TIMEOUT,
        f"the run passed its deadline (timeout_ms {timeout_ms}, or an ancestor's)",
        Events(),
        steps,
        stop_descendants=True,
    )


def limit_reached(engine: Engine, run: RunView, limit: LimitReached) -> RunView:
    """A call limit or budget had no room for the next call: fail, or wait BLOCKED at the
    step (raising the limit and resuming re-runs it)."""
    if not limit.blocks:
        code = LIMIT_EXCEEDED if limit.code == BUDGET_EXHAUSTED else limit.code
        return fail(engine, run, code, str(limit), Events(), [])
    # Resumed, the step replays: the calls it recorded before the block are reused.
    run = run.with_state(**{hitl.REPLAY_KEY: True}).ended("BLOCKED", limit.code, str(limit))
    events = Events()
    events.add("run.status", status="BLOCKED", reason="budget_exhausted", message=str(limit))
    return engine._commit(run, Save([], events)).run


def fail(
    engine: Engine, run: RunView, code: str, message: str, events: Events, steps: list[StepRecord]
) -> RunView:
    return finish(engine, run, "FAILED", code, message, events, steps)


def finish(
    engine: Engine,
    run: RunView,
    status: str,
    code: str,
    message: str,
    events: Events,
    steps: list[StepRecord],
    *,
    stop_descendants: bool = False,
) -> RunView:
    """End the run `status`; `stop_descendants`: its unfinished descendants stop too."""
    run = run.ended(status, code, message)
    events.add("run.status", status=status, error_code=code, error_message=message)
    adopt = engine.handoff_s > 0
    forget = memory.ending_with(run)
    done = engine._commit(
        run, Finish(steps, events, adopt, stop_descendants=stop_descendants, forget=forget)
    )
    for child_id in done.stopped:
        engine.enqueue(child_id)
    if done.woken is None:
        pass
    elif done.taken == done.woken:
        engine._handoff = done.woken  # this worker goes on with the parent it woke
    else:
        engine.enqueue(done.woken)
    return done.run


def cancel(engine: Engine, run: RunView) -> RunView:
    """End the run CANCELLED; the steps it waits on (children, a person) end with it."""
    steps = unfinished_steps(engine, run, "CANCELLED")
    return finish(engine, run, "CANCELLED", "CANCELLED", "the run was cancelled", Events(), steps)


def unfinished_steps(engine: Engine, run: RunView, status: str, **fields: Any) -> list[StepRecord]:
    """The records of the steps a run ending now leaves behind: its group of steps
    waiting on children, or the tool step waiting on a person's approval."""
    if not run.plan:
        return []
    attempt = 1  # a group's records are written as attempt 1 (_start_children, _join)
    if run.status == "WAITING":
        positions = plans.group_at(run.plan, run.cursor)
    elif (
        run.status == "PAUSED"
        and hitl.AWAITING_KEY not in run.state
        and run.cursor < len(run.planned())
        and run.planned()[run.cursor]["type"] == "TOOL_CALL"
    ):
        positions, attempt = [run.cursor], run.attempt
    else:
        return []
    return [
        StepRecord(
            run.planned()[position]["key"],
            position,
            run.planned()[position]["name"],
            run.planned()[position]["type"],
            status,
            run.iteration,
            attempt=attempt,
            **fields,
        )
        for position in positions
    ]
