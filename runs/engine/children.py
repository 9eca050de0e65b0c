"""Child steps: start a group's child runs, join their outcomes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runs.engine import checkpoints, endings, hiring, hitl, step_review, versions
from runs.engine import plan as plans
from runs.engine.definition import Definition
from runs.engine.limits import LimitReached
from runs.engine.outcomes import Failed, OverBudget, WaitingOnChildren
from runs.engine.ports import (
    LIMIT_EXCEEDED,
    VALIDATION_ERROR,
    Save,
    Spawn,
)
from runs.engine.state import (
    WRITES_KEY,
    ChildOutcome,
    ChildRequest,
    Events,
    RunView,
    StepRecord,
)

if TYPE_CHECKING:
    from runs.engine.core import Engine


def child_names(engine: Engine, run: RunView) -> dict[str, str]:
    """The names of the entities the run's plan may start: its children and (an entity that
    hires) its delegation templates."""
    refs = [link["child_id"] for link in run.definition["hierarchy"]["children"]]
    refs += [r for r in hiring.delegation(run.definition)["templates"] if r not in refs]
    if not refs:
        return {}
    found = engine.store.definitions(run, refs)
    return {ref: child["identity"]["name"] for ref, child in found.items()}


def start_children(
    engine: Engine, run: RunView, group: list[int]
) -> tuple[RunView, WaitingOnChildren | Failed | OverBudget | None]:
    """Start the group's child runs and persist the run WAITING on them; None when every
    child was skipped by its condition (the run goes on); Failed when they cannot start
    (the run has ended); OverBudget when their budgets or their entities' lifetime costs
    have no room (nothing was written)."""
    steps: list[StepRecord] = []
    events = Events()
    writes: dict[str, list[str]] = {}
    requests = child_requests(engine, run, group, steps, events, writes)
    if writes or WRITES_KEY in run.state:
        run = run.with_state(**{WRITES_KEY: writes}) if writes else run.without_state(WRITES_KEY)
    if not isinstance(requests, Failed) and requests and run.depth + 1 > run.depth_limit:
        requests = Failed(
            LIMIT_EXCEEDED,
            f"starting {requests[0].entity_ref!r} would nest {run.depth + 1} levels deep, "
            f"more than max_recursion_depth {run.depth_limit} of the run's root",
        )
    if isinstance(requests, Failed):
        return endings.fail(engine, run, requests.code, requests.message, events, steps), requests
    if not requests:
        run = run.changed(cursor=group[-1] + 1)
        return engine._commit(run, Save(steps, events)).run, None
    waiting = run.changed(status="WAITING")
    hired = sum(1 for r in requests if r.hire is not None)
    if hired:  # written with the spawn: max_subordinates counts every hire of the run
        count = int(run.state.get(hiring.HIRES_KEY) or 0) + hired
        waiting = waiting.with_state(**{hiring.HIRES_KEY: count})
    adopt = engine.handoff_s > 0
    try:
        done = engine._commit(waiting, Spawn(requests, steps, events, adopt=adopt))
    except LimitReached as limit:  # the store's answer: no room for the children's budgets
        return run, OverBudget(limit)
    return done.run, WaitingOnChildren(done.child_ids, done.taken)


def child_requests(
    engine: Engine,
    run: RunView,
    group: list[int],
    steps: list[StepRecord],
    events: Events,
    writes: dict[str, list[str]],
) -> list[ChildRequest] | Failed:
    """The children the group starts (a step whose condition is false is SKIPPED), with
    their step records and events; Failed when a child entity no longer exists, or its
    mapping reads a state key the child does not declare it reads. `writes` gains, for
    each child that declares `state_contract.writes_to`, the keys it may write."""
    data = engine._data(run)
    requests: list[ChildRequest] = []
    hires = [i for i in group if run.planned()[i]["type"] == hiring.DELEGATE]
    names: dict[str, str] = {}
    if hires:
        names = child_names(engine, run)
        targets = [str(run.planned()[i]["target_entity"]) for i in hires]
        found = engine.store.definitions(run, [t for t in targets if t not in names])
        names.update({ref: child["identity"]["name"] for ref, child in found.items()})
        asked = [hiring.request_of(run.planned()[i]) for i in hires]
        hired = int(run.state.get(hiring.HIRES_KEY) or 0)
        refused = hiring.refusal(run.definition, hired, asked, names)
        if refused is not None:
            return Failed(*refused)
    for position in group:
        step = run.planned()[position]
        if step["type"] == hiring.DELEGATE:
            request = _hire_request(engine, run, step, position, len(requests), names)
            if isinstance(request, Failed):
                return request
            steps.append(request[1])
            requests.append(request[0])
            events.add(
                "run.hired",
                step=step["name"],
                role=request[0].hire.role if request[0].hire else "",
                template=names.get(request[0].entity_ref, request[0].entity_ref),
            )
            continue
        if not plans.holds(step.get("condition"), data):
            record = StepRecord(
                step["key"], position, step["name"], step["type"], "SKIPPED", run.iteration
            )
            steps.append(record)
            events.add("step.skipped", step=step["name"], reason="condition is false")
            continue
        child = engine.store.definitions(run, [step["target_entity"]]).get(step["target_entity"])
        if child is None:
            return Failed(VALIDATION_ERROR, _unresolved(engine, run, step))
        contract = child["io_contract"].get("state_contract") or {}
        readable = contract.get("reads_from") or None  # none declared: it may read any
        mapping = step.get("input_mapping") or {}
        if mapping and readable is not None:
            undeclared = plans.undeclared_reads(mapping, readable)
            if undeclared != []:
                return Failed(VALIDATION_ERROR, _undeclared(step, child, undeclared, readable))
        child_input = plans.map_input(
            mapping, child["io_contract"]["input"]["schema"], data, readable
        )
        if contract.get("writes_to"):
            writes[step["key"]] = list(contract["writes_to"])
        steps.append(
            StepRecord(
                step["key"],
                position,
                step["name"],
                step["type"],
                "WAITING",
                run.iteration,
                input=child_input,
                started_at=engine.clock.now(),
            )
        )
        carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in run.state}
        requests.append(
            ChildRequest(
                step["key"], len(requests), step["target_entity"], child_input, carried or None
            )
        )
        events.add("step.started", step=step["name"], type=step["type"])
    return requests


def _hire_request(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    position: int,
    index: int,
    names: dict[str, str],
) -> tuple[ChildRequest, StepRecord] | Failed:
    """The child run a DELEGATE step hires, and its step record (WAITING)."""
    asked = hiring.request_of(step)
    ref = hiring.template_ref(run.definition, asked.template, names)
    child = engine.store.definitions(run, [ref]).get(ref)
    if child is None:
        return Failed(VALIDATION_ERROR, f"step {step['name']!r}: template {ref!r} no longer exists")
    carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in run.state}
    request = hiring.child_request(run.definition, asked, ref, step["key"], index, child, carried)
    record = StepRecord(
        step["key"],
        position,
        step["name"],
        step["type"],
        "WAITING",
        run.iteration,
        input={**request.input, "role": asked.role, "reason": asked.reason},
        started_at=engine.clock.now(),
    )
    return request, record


def _unresolved(engine: Engine, run: RunView, step: dict[str, Any]) -> str:
    """Why a child step's entity did not resolve: gone, or (a link with a range) none of
    the versions it had when the trace started is one the range allows."""
    ref = str(step["target_entity"])
    wanted = versions.link_ranges(run.definition).get(ref)
    saved = engine.store.child_versions(run, ref) if wanted is not None else None
    if wanted is None or saved is None:
        return f"step {step['name']!r}: child {ref!r} no longer exists"
    return (
        f"step {step['name']!r}: no version of child {ref!r} saved by the run's start matches "
        f"{wanted} (the link {versions.link_path(run.definition, ref)}.version); it had "
        f"{versions.span(saved)} then"
    )


def join(engine: Engine, run: RunView) -> tuple[RunView, bool]:
    """Collect the current group's children; False while one is unfinished."""
    group = plans.group_at(run.plan or [], run.cursor)
    keys = [run.planned()[i]["key"] for i in group]
    outcomes = engine.store.children(run, keys)
    if outcomes is None:
        return run, False
    events = Events()
    steps: list[StepRecord] = []
    failed: ChildOutcome | None = None
    position_of = {run.planned()[i]["key"]: i for i in group}
    reviewing = step_review.reviews_steps(run.definition)
    results: list[tuple[int, Any]] = []
    for outcome in outcomes:
        step = run.planned()[position_of[outcome.step_key]]
        if outcome.status == "COMPLETED":
            if reviewing:  # its result lands in the state once it passed its review
                results.append((position_of[outcome.step_key], outcome.output))
            else:
                run = engine._new_state(run, step, outcome.output, events)
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
            fired = outcome.fired_reason is not None
            steps.append(
                StepRecord(
                    step["key"],
                    position_of[outcome.step_key],
                    step["name"],
                    step["type"],
                    "FAILED",
                    run.iteration,
                    error_code=hiring.FIRED if fired else outcome.error_code,
                    error_message=f"fired: {outcome.fired_reason}"
                    if fired
                    else outcome.error_message,
                )
            )
            events.add("step.finished", step=step["name"], status=outcome.status)
    if results and failed is None:
        run = run.changed(status="RUNNING")  # a child run again starts anew
        run, verdict, kept = step_review.review_results(
            engine, run, results, events, steps, restart_at=group[0]
        )
        if verdict != step_review.PASSED:
            return run, verdict == step_review.AGAIN
        results = [(position, output) for (position, _), output in zip(results, kept, strict=True)]
    for position, output in results:
        run = engine._new_state(run, run.planned()[position], output, events)
    if failed is not None:
        code = failed.error_code or "CHILD_FAILED"
        message = f"{failed.entity_name} {failed.status.lower()}: {failed.error_message}"
        if failed.fired_reason is not None:  # a fired subordinate: its hirer's step fails
            code = hiring.FIRED
            message = f"{failed.entity_name} was fired: {failed.fired_reason}"
        if failed.status == "FAILED" or failed.fired_reason is not None:
            position = position_of[failed.step_key]
            run, asked = checkpoints.on_failure_checkpoint(
                engine, run, run.planned()[position], position, code, message, events, steps
            )
            if asked is not None:
                return run, False  # a person decides what becomes of the failure
        return endings.fail(engine, run, code, message, events, steps), False
    run = run.changed(status="RUNNING")
    run = engine._go_on(run, run.planned()[group[-1]], group[-1], events, steps)
    return run, run.status == "RUNNING"


def _undeclared(
    step: dict[str, Any], child: Definition, undeclared: list[str] | None, readable: list[str]
) -> str:
    """Why a child's mapping may not read what it reads (state_contract.reads_from)."""
    name = child["identity"]["name"]
    what = (
        "keys it does not name (a computed or whole-state var)"
        if undeclared is None
        else ", ".join(repr(key) for key in undeclared)
    )
    return (
        f"step {step['name']!r}: its input mapping reads {what} from the state, which "
        f"{name!r} does not declare in io_contract.state_contract.reads_from "
        f"({', '.join(readable)})"
    )
