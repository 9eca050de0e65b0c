"""Reviewing each step's result (`review_mechanism.scope: EACH_STEP`, seed 000 §4.1).

The seed's engine reviews every step's result as it finishes, before the plan goes on: a
model's answer, a tool's result, a child's output. An entity chooses that, or the review of
its output at the end of each pass (`OUTPUT`, the default: `endings.run_review`).

The same criteria and judge as the output's review (`review.py`), each judge call recorded
under a review record of its own (`<step key>~review`), so a replay reuses it. When a
result fails, `on_failure` decides, for the step:

- RETRY re-runs the step (its next attempt, the review's detail in the state as
  `review_feedback` for the model), up to the retry policy's `max_retries`; then the run
  fails VALIDATION_ERROR naming the step and the criterion;
- ESCALATE asks a person about the result (approve keeps it, edit replaces it, reject
  re-plans under ALTERNATIVE_PATH or ends the run), as does a judge that routes it to
  human review. The run pauses; the decision replays the step (its model and tool calls
  and the judge's recalled, not paid again) up to the question, which then has its answer;
- ALTERNATIVE_PATH re-plans with the failure as feedback and starts another pass, bounded
  like the output's review (its retries count in the same `_review_retries`);
- ABORT fails the run.

A judge whose own call failed goes by the retry policy: the step runs again (its model
call for the next attempt is a new call: what a retry is).

The result lands in the state only once it passed: a step that runs again never leaves a
rejected answer behind for the next step to read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runs.engine import checkpoints, endings, hitl, retry, review
from runs.engine import plan as plans
from runs.engine.definition import Definition
from runs.engine.limits import LimitReached
from runs.engine.outcomes import OverBudget, RetryAt
from runs.engine.ports import VALIDATION_ERROR, Save
from runs.engine.state import REVIEW_RETRIES_KEY, Events, RunView, StepRecord
from runs.engine.validators import schema_problems

if TYPE_CHECKING:
    from runs.engine.core import Engine

PASSED, AGAIN, STOP = "passed", "again", "stop"
REVIEW_SUFFIX = "~review"


def reviews_steps(definition: Definition) -> bool:
    """Whether the entity reviews each step's result (else its output, or nothing)."""
    mechanism = definition["logic_gate"]["review_mechanism"]
    return bool(mechanism.get("enabled")) and mechanism.get("scope", "OUTPUT") == "EACH_STEP"


def review_results(
    engine: Engine,
    run: RunView,
    results: Sequence[tuple[int, Any]],
    events: Events,
    steps: list[StepRecord],
    restart_at: int | None = None,
) -> tuple[RunView, str, list[Any]]:
    """Review the results of the steps at these positions (one step, or a group of
    children), in order, stopping at the first that does not pass. PASSED: each passed
    (a person may have edited one: the results to go on with are answered), its review
    record appended to `steps`; AGAIN: the step (or group) runs again or the plan was
    re-made, the run goes on from its cursor; STOP: the run waits (a person, a retry's
    delay, a budget) or ended, `steps` written with it. A step run again starts at
    `restart_at` (a group of children: its first step), else at its own position."""
    kept: list[Any] = []
    for position, output in results:
        step = run.planned()[position]
        at = position if restart_at is None else restart_at
        run, verdict, output = _review_one(engine, run, step, at, output, events, steps)
        if verdict != PASSED:
            return run, verdict, kept
        kept.append(output)
    return run, PASSED, kept


def _review_one(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    restart_at: int,
    output: Any,
    events: Events,
    steps: list[StepRecord],
) -> tuple[RunView, str, Any]:
    mechanism = run.definition["logic_gate"]["review_mechanism"]
    record = StepRecord(
        f"{step['key']}{REVIEW_SUFFIX}",
        run.planned().index(step),
        f"Review of {step['name']}",
        "REVIEW",
        "RUNNING",
        run.iteration,
        attempt=run.attempt,
        started_at=engine.clock.now(),
    )
    run, result, record = endings.reviewed(engine, run, output, record, f"review:{step['key']}")
    if isinstance(result, LimitReached):  # a judge's call had no room: the step waits
        run = engine._later(run, steps, events)
        return endings.limit_reached(engine, run, result), STOP, output
    if result.human_review or (not result.passed and mechanism["on_failure"] == "ESCALATE"):
        return _ask_person(engine, run, step, output, result, record, events, steps)
    if result.passed:
        steps.append(record.changed(status="COMPLETED"))
        events.add("review.passed", step=step["name"], criteria=list(result.passed_criteria))
        return run, PASSED, output
    run, verdict = _failed(engine, run, step, restart_at, result, record, events, steps)
    return run, verdict, output


def _failed(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    restart_at: int,
    result: review.ReviewResult,
    record: StepRecord,
    events: Events,
    steps: list[StepRecord],
) -> tuple[RunView, str]:
    """A step's result failed its review (or its judge failed): on_failure decides; a
    step run again starts at `restart_at`."""
    mechanism = run.definition["logic_gate"]["review_mechanism"]
    on_failure = mechanism["on_failure"]
    policy = run.definition["logic_gate"]["retry_policy"]
    steps.append(record.failed(result.error_code or VALIDATION_ERROR, result.detail))
    events.add("review.failed", step=step["name"], detail=result.detail, on_failure=on_failure)
    name = step["name"]
    if result.error_code:  # the judge itself failed: the retry policy decides
        decision = retry.decide(result.error_code, result.retryable, run.attempt, policy)
        if isinstance(decision, retry.Retry):
            run = run.at(restart_at, attempt=decision.attempt)
            events.add("step.retry", step=name, attempt=decision.attempt, reason="review")
            return engine._schedule(run, RetryAt(decision.delay_s), steps, events), STOP
        message = f"step {name!r}: its review failed: {result.detail}"
        return endings.fail(engine, run, result.error_code, message, events, steps), STOP
    if on_failure == "RETRY" and run.attempt <= int(policy["max_retries"]):
        run = run.at(restart_at, attempt=run.attempt + 1).with_state(review_feedback=result.detail)
        events.add("step.retry", step=name, attempt=run.attempt, reason="review")
        return engine._commit(run, Save(steps, events)).run, AGAIN
    retries = int(run.state.get(REVIEW_RETRIES_KEY, 0))
    if on_failure == "ALTERNATIVE_PATH" and retries < int(policy["max_retries"]):
        run = run.with_state(**{REVIEW_RETRIES_KEY: retries + 1, "review_feedback": result.detail})
        run = engine._later(run, steps, events)
        return endings.another_plan(engine, run, result)
    message = f"the result of step {name!r} failed its review: {result.detail}"
    if on_failure == "RETRY":
        message += f" (after {run.attempt} attempts)"
    elif on_failure == "ALTERNATIVE_PATH":
        message += f" (after {retries} new plans)"
    return endings.fail(engine, run, VALIDATION_ERROR, message, events, steps), STOP


def _ask_person(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    output: Any,
    result: review.ReviewResult,
    record: StepRecord,
    events: Events,
    steps: list[StepRecord],
) -> tuple[RunView, str, Any]:
    """A person decides on a step's result the review sent them. The first time the run
    pauses (STOP); replayed after the decision, the question has its answer: approve (or
    nobody deciding, PROCEED) keeps the result, edit replaces it (PASSED), reject re-plans
    under ALTERNATIVE_PATH (AGAIN) or ends the run (STOP)."""
    judge = result.judge
    name = step["name"]
    reason = (
        result.detail if result.human_review else "the review failed and on_failure is ESCALATE"
    )
    risk: list[tuple[str, str]] = [("medium", f"review of {name!r}: {result.detail}")]
    for flag in (judge or {}).get("risk_flags") or []:
        risk.append(("medium", f"judge flag: {flag}"))
    confidence: dict[str, int | None] = {"plan": None, "execution": None, "output": None}
    if judge is not None:
        confidence["execution"] = round(float(judge["confidence"]) * 100)
    schema = result_schema(engine, run, step)
    waiting = record.waiting(result.detail)
    run, answer = checkpoints.ask_person(
        engine,
        run,
        hitl.default_checkpoint(run.definition, "REVIEW_ESCALATE", reason),
        checkpoints.Question(
            key=f"REVIEW:{step['key']}:{run.iteration}:{run.attempt}",
            step_name=name,
            subject="output",
            payload=output,
            edit_schema=schema,
            reasoning=f"the result of step {name!r} needs a person: {reason}"
            + ("" if result.human_review else f". {result.detail}")
            + ". Approve to go on with it, edit it, or reject it.",
            risk=risk,
            judge=judge,
            confidence=confidence,
            context={"review": result.detail},
            # A group of children is joined again after the decision, not started again.
            resume_status="WAITING" if step["type"] in plans.STARTS_A_RUN else "RUNNING",
        ),
        steps=[*steps, waiting],
        events=_with(events, "review.escalated", step=name, detail=result.detail),
    )
    if not isinstance(answer, hitl.ApprovalVerdict):
        if answer is None:  # a notification only: the result goes on
            steps.append(record.changed(status="COMPLETED"))
            return run, PASSED, output
        return run, STOP, output  # the run waits on the person
    by = answer.decided_by or "timeout"
    if answer.outcome in (hitl.REJECT, hitl.ABORT):
        what = f"the result of step {name!r}"
        steps.append(record.failed(VALIDATION_ERROR, f"rejected by {by}"))
        run, replanned = checkpoints.rejected_replan(engine, run, answer, what, events)
        if isinstance(replanned, OverBudget):
            run = engine._later(run, steps, events)
            return endings.limit_reached(engine, run, replanned.limit), STOP, output
        if replanned:
            return engine._later(run, steps, Events()), AGAIN, output
        run = checkpoints.refused_by_person(engine, run, answer, what, events, steps)
        return run, STOP, output
    if answer.outcome == hitl.EDIT:
        problems = schema_problems(schema, answer.payload) if schema else []
        if problems:
            message = f"the edited result of step {name!r}: " + "; ".join(problems)
            return endings.fail(engine, run, VALIDATION_ERROR, message, events, steps), STOP, output
        output = answer.payload
        events.add("output.edited", step=name, by=by)
    steps.append(record.changed(status="COMPLETED", output={"passed": True, "by": by}))
    events.add("review.passed", step=name, by=by)
    return run, PASSED, output


def _with(events: Events, kind: str, **payload: Any) -> Events:
    """`events` and one more, for a write that may not happen again on replay."""
    more = Events(list(events.items))
    more.add(kind, **payload)  # type: ignore[arg-type]
    return more


def result_schema(engine: Engine, run: RunView, step: dict[str, Any]) -> dict[str, Any] | None:
    """The schema a person's edit of the step's result must meet: a THOUGHT answers the
    entity's output schema, a child its own; a tool's result has none here."""
    if step["type"] == "THOUGHT":
        return run.definition["io_contract"]["output"]["schema"]
    if step["type"] in plans.STARTS_A_RUN:
        child = engine.store.definitions(run, [step["target_entity"]]).get(step["target_entity"])
        return child["io_contract"]["output"]["schema"] if child else None
    return None
