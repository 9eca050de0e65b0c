"""The reasoning loop's built-in `delegate` tool (issue 20): an agent whose
`capabilities.delegation` is enabled is offered, turn after turn, a function that hires a
subordinate for one part of its task, and reads the subordinate's work as the call's result.

A turn's delegate calls are checked one by one against the hiring rules
(runs/engine/hiring.py `refusal`: the templates, max_subordinates, max_budget_usd_each) and
max_recursion_depth; a refused call goes back to the model as an error it can read, like a
refused tool call. The SUBAGENT_SPAWN checkpoint asks a person once for the turn's hires
(a rejection, too, is heard by the model). The hires that pass start together, in one commit:
their budgets reserved from the hirer's (all or none: a budget with no room for them all is
an error the model hears), the hirer persisted WAITING with its THOUGHT step WAITING, and no
worker held while they work. The last of them to end wakes the hirer: `join` collects each
one's output (or why it failed, was fired or was cancelled) into the hirer's state, and the
step runs again. That replay reuses every model and tool call recorded before the wait, and
the loop reads each delegate call's result where it waited: nothing is paid twice, and no
hire is made twice (a hire's child is keyed by the step, the call's index, the pass and the
attempt).

A subordinate that fails does not fail its hirer: the hirer's model hears why and decides
(hire another, do the part itself, or answer without it), as with any tool.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from runs.engine import checkpoints, hiring, hitl
from runs.engine.definition import Definition
from runs.engine.limits import LimitReached
from runs.engine.outcomes import NeedsApproval, WaitingOnChildren
from runs.engine.ports import LIMIT_EXCEEDED, VALIDATION_ERROR, Spawn
from runs.engine.state import ChildOutcome, ChildRequest, Events, RunView, StepRecord

if TYPE_CHECKING:
    from runs.engine.core import Engine

TOOL = "delegate"  # the function name the model sees
WAITING_KEY = "_delegating"  # the hirer's state while it waits: the hires' step keys
RESULTS_KEY = "_delegated"  # the hirer's state: each hire's result, by its child step key
_DESCRIPTION_CHARS = 300  # of each template's description the function's shows
_RESULT_CHARS = 20_000  # of one subordinate's output the model is shown


def offers(definition: Definition) -> bool:
    """Whether the entity's reasoning loop offers the delegate tool."""
    return bool(hiring.delegation(definition)["enabled"])


def templates(engine: Engine, run: RunView) -> dict[str, Definition]:
    """The delegation's templates the store resolves, by reference."""
    refs = hiring.delegation(run.definition)["templates"]
    return engine.store.definitions(run, refs) if refs else {}


def function(definition: Definition, found: dict[str, Definition]) -> dict[str, Any]:
    """The delegate tool as the model is offered it: the templates by entity name (each
    with its description), the role, task and reason asked for, the budget bounded by
    max_budget_usd_each."""
    rules = hiring.delegation(definition)
    names = [found[ref]["identity"]["name"] for ref in rules["templates"] if ref in found]
    described = "; ".join(
        f"{found[ref]['identity']['name']}: "
        + _cut(found[ref]["identity"].get("description") or "no description", _DESCRIPTION_CHARS)
        for ref in rules["templates"]
        if ref in found
    )
    budget: dict[str, Any] = {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "Its budget in US dollars, taken from yours while it works; what it "
        "does not spend comes back to you. Leave it out for the default.",
    }
    if rules["max_budget_usd_each"] is not None:
        budget["maximum"] = float(rules["max_budget_usd_each"])
    return {
        "name": TOOL,
        "description": (
            "Hire a subordinate to do one part of your task. It works on that part alone, "
            "with the role you give it, and its work comes back to you as this call's "
            "result. Hire one subordinate per distinct part, several in one turn to have them "
            f"work at the same time; at most {rules['max_subordinates']} in all. "
            f"Templates: {described or 'none'}."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "template": {"type": "string", "enum": names},
                "role": {"type": "string", "minLength": 1, "maxLength": hiring.ROLE_MAX},
                "task": {"type": "string", "minLength": 1, "maxLength": hiring.TASK_MAX},
                "reason": {"type": "string", "maxLength": hiring.REASON_MAX},
                "budget_usd": budget,
            },
            "required": ["template", "role", "task", "reason"],
            "additionalProperties": False,
        },
    }


def child_key(record: StepRecord, index: int) -> str:
    """The step key the hire of the loop's call `index` starts its child under."""
    return f"{record.key}.hire{index}"


def known(run: RunView, record: StepRecord, index: int) -> str | None:
    """What a delegate call of the loop returned, when its subordinate has ended."""
    results = run.state.get(RESULTS_KEY) or {}
    return results.get(f"{child_key(record, index)}#{record.iteration}.{record.attempt}")


def request_of(arguments: Any) -> hiring.HireRequest | str:
    """The hire a delegate call asks for, or why it is not one."""
    if not isinstance(arguments, dict):
        return "the delegate tool takes an object: template, role, task, reason"
    budget = hiring.as_budget(arguments.get("budget_usd"))
    if isinstance(budget, str):
        return budget
    return hiring.HireRequest(
        role=hiring.bounded(arguments.get("role"), hiring.ROLE_MAX),
        task=str(arguments.get("task") or "").strip()[: hiring.TASK_MAX],
        template=str(arguments.get("template") or ""),
        budget_usd=budget,
        reason=hiring.bounded(arguments.get("reason"), hiring.REASON_MAX),
    )


def hire(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    asked: list[tuple[int, Any]],
    found: dict[str, Definition],
) -> tuple[RunView, WaitingOnChildren | NeedsApproval | dict[int, str]]:
    """Hire for the turn's delegate calls not yet made (`asked`: each call's index and
    arguments; `found`: the templates, `templates`): WaitingOnChildren when some started
    (the run is persisted WAITING on them); NeedsApproval when a person is asked first;
    else what each call returns to the model (every one was refused)."""
    names = {ref: definition["identity"]["name"] for ref, definition in found.items()}
    hired = int(run.state.get(hiring.HIRES_KEY) or 0)
    refused: dict[int, str] = {}
    passed: list[tuple[int, hiring.HireRequest, str]] = []
    for index, arguments in asked:
        request = request_of(arguments)
        if isinstance(request, str):
            refused[index] = _error(VALIDATION_ERROR, request)
            continue
        problem = hiring.refusal(run.definition, hired + len(passed), [request], names)
        if problem is None and run.depth + 1 > run.depth_limit:
            problem = (
                LIMIT_EXCEEDED,
                f"hiring {request.role!r} would nest {run.depth + 1} levels deep, more than "
                f"max_recursion_depth {run.depth_limit} of the run's root",
            )
        if problem is not None:
            refused[index] = _error(*problem)
            continue
        ref = hiring.template_ref(run.definition, request.template, names)
        passed.append((index, request, ref))
    if passed:
        run, verdict = _approval(engine, run, step, record, passed, names)
        if isinstance(verdict, NeedsApproval):
            return run, verdict
        if verdict is not None:  # a person said no: the model hears it
            refused |= {index: verdict for index, _, _ in passed}
        else:
            run = _remembered(run, record, refused)
            run, started = _spawn(engine, run, record, passed, found, names)
            if not isinstance(started, str):
                return run, started
            refused |= {index: started for index, _, _ in passed}  # none was hired
    # Kept with the run's next write: a replay of the loop hears the same refusals.
    return _remembered(run, record, refused), refused


def _remembered(run: RunView, record: StepRecord, answers: dict[int, str]) -> RunView:
    if not answers:
        return run
    results = dict(run.state.get(RESULTS_KEY) or {})
    suffix = f"#{record.iteration}.{record.attempt}"
    results |= {f"{child_key(record, index)}{suffix}": text for index, text in answers.items()}
    return run.with_state(**{RESULTS_KEY: results})


def _approval(
    engine: Engine,
    run: RunView,
    step: dict[str, Any],
    record: StepRecord,
    passed: list[tuple[int, hiring.HireRequest, str]],
    names: dict[str, str],
) -> tuple[RunView, NeedsApproval | str | None]:
    """The SUBAGENT_SPAWN checkpoint for the turn's hires: None to go on, NeedsApproval,
    or the refusal the model hears when a person said no."""
    proposed = [
        {
            "step": step["name"],
            "template": names.get(ref, ref),
            "role": request.role,
            "task": request.task,
            "budget_usd": None if request.budget_usd is None else str(request.budget_usd),
            "reason": request.reason,
        }
        for _, request, ref in passed
    ]
    key = f"SUBAGENT_SPAWN:{record.key}:{record.iteration}:{record.attempt}:{passed[0][0]}"
    run, verdict = checkpoints.hire_question(
        engine, run, step["name"], key, proposed, "refuse it (the agent hears why and goes on)"
    )
    if isinstance(verdict, NeedsApproval):
        return run, verdict
    if verdict is not None and verdict.outcome in (hitl.REJECT, hitl.ABORT):
        because = f": {verdict.notes}" if verdict.notes else ""
        return run, _error("REJECTED", f"a person did not approve the hire{because}")
    return run, None


def _spawn(
    engine: Engine,
    run: RunView,
    record: StepRecord,
    passed: list[tuple[int, hiring.HireRequest, str]],
    found: dict[str, Definition],
    names: dict[str, str],
) -> tuple[RunView, WaitingOnChildren | str]:
    """Start the hires in one commit, the run WAITING on them; or why none started."""
    carried = {k: run.state[k] for k in hitl.CARRIED_KEYS if k in run.state} or None
    requests: list[ChildRequest] = []
    events = Events()
    for position, (index, request, ref) in enumerate(passed):
        requests.append(
            hiring.child_request(
                run.definition,
                request,
                ref,
                child_key(record, index),
                position,
                found[ref],
                carried,
            )
        )
        events.add("run.hired", step=record.name, role=request.role, template=names.get(ref, ref))
    keys = [child_key(record, index) for index, _, _ in passed]
    waiting = run.changed(status="WAITING").with_state(
        **{
            hiring.HIRES_KEY: int(run.state.get(hiring.HIRES_KEY) or 0) + len(passed),
            WAITING_KEY: keys,
        }
    )
    try:
        done = engine._commit(
            waiting,
            Spawn(requests, [record.waiting()], events, adopt=engine.handoff_s > 0),
        )
    except LimitReached as limit:  # the store's answer: no room for their budgets
        return run, _error(LIMIT_EXCEEDED, f"no hire was made: {limit}")
    return done.run, WaitingOnChildren(done.child_ids, done.taken)


def waiting(run: RunView) -> bool:
    """Whether the run waits on subordinates its reasoning loop hired."""
    return bool(run.state.get(WAITING_KEY))


def join(engine: Engine, run: RunView) -> tuple[RunView, bool]:
    """The loop's hires, once every one has ended: each one's result lands in the state for
    the loop to read, and the THOUGHT step at the cursor runs again (replaying its recorded
    calls). False while one is still at work."""
    keys: list[str] = list(run.state[WAITING_KEY])
    outcomes = engine.store.children(run, keys)
    if outcomes is None:
        return run, False
    suffix = f"#{run.iteration}.{run.attempt}"
    results = dict(run.state.get(RESULTS_KEY) or {})
    for outcome in outcomes:
        results[f"{outcome.step_key}{suffix}"] = result_text(outcome)
    run = run.without_state(WAITING_KEY).with_state(**{RESULTS_KEY: results})
    # The step replays: what it recorded before the wait is read back, not called again.
    return run.changed(status="RUNNING", resumed=True), True


def result_text(outcome: ChildOutcome) -> str:
    """What a delegate call returns to the model: the subordinate's output, or why there
    is none."""
    if outcome.fired_reason is not None:
        return _error(hiring.FIRED, f"{outcome.entity_name} was fired: {outcome.fired_reason}")
    if outcome.status != "COMPLETED":
        code = outcome.error_code or outcome.status
        message = f"{outcome.entity_name} {outcome.status.lower()}: {outcome.error_message or ''}"
        return _error(code, message.rstrip(": "))
    text = json.dumps(outcome.output, default=str, ensure_ascii=False, sort_keys=True)
    return _cut(text, _RESULT_CHARS)


def done(run: RunView) -> RunView:
    """The step answered: the hires' results leave the state (its output holds the work)."""
    return run.without_state(RESULTS_KEY) if RESULTS_KEY in run.state else run


def _error(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
