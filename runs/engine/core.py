"""`advance(run_id)`: take the run's lease, do the next piece of work, record it, return.

Never blocks on a child or a human: child steps start child runs and leave the run WAITING;
the last child to finish wakes the parent. Failures are data: a step that fails ends the run
with an error code from the seed's families, and every row written so far stays.

The driver lives here; each kind of step in a module of its own (start, children,
thoughts, tool_steps, checkpoints, endings), the run's data in state, limits and outcomes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from runs.engine import (
    checkpoints,
    children,
    delegating,
    endings,
    hitl,
    retry,
    start,
    step_review,
    thoughts,
    tool_steps,
)
from runs.engine import plan as plans
from runs.engine.limits import (
    BUDGET_EXHAUSTED,
    LimitReached,
    LimitRow,
    budget_blocks,
    first_limit_hit,
    lifetime_limit,
    lifetime_used,
    no_room_for_children,
    run_limits,
)
from runs.engine.outcomes import (
    Completed,
    Failed,
    NeedsApproval,
    OverBudget,
    RetryAt,
    WaitingOnChildren,
)
from runs.engine.ports import (
    INTERNAL_ERROR,
    LIMIT_EXCEEDED,
    REJECTED,
    Cipher,
    Clock,
    Committed,
    LeaseLost,
    ModelClient,
    Record,
    RunStore,
    Save,
    Schedule,
    Screening,
    SystemClock,
    ToolRunner,
    Transition,
)
from runs.engine.state import (
    RESTART_AT_KEY,
    TERMINAL,
    WRITES_KEY,
    ChildOutcome,
    ChildRequest,
    Events,
    RunView,
    StepRecord,
    child_step_key,
)
from runs.engine.validators import input_problems, schema_problems


@dataclass
class Engine:
    """The driver: `advance` loads a run, takes its next steps through the step modules
    and the ports, and commits after each."""

    store: RunStore
    model: ModelClient
    tools: ToolRunner
    enqueue: Callable[[str], None]
    # Content filters and pii_handling (governance/safety.py's SafetyScreening on the server).
    screening: Screening
    enqueue_later: Callable[[str, float], None] = lambda run_id, delay_s: None
    max_steps_per_advance: int = 200
    hard_cap: int = 25  # passes of a loop, whatever max_iterations says
    max_tool_turns: int = 20  # turns of a reasoning loop (runs/engine/react.py) per step
    # pii_handling ENCRYPT: `encrypt(str) -> str` and `decrypt(str) -> str` (the vault's);
    # without one, ENCRYPT stores redacted text instead, never the plain text.
    cipher: Cipher | None = None
    clock: Clock = field(default_factory=SystemClock)
    # Handoff: a worker goes on itself with the first child it starts and the parent it
    # wakes (their leases taken in the same commits) instead of a hint to any worker and a
    # claim, for up to this many seconds per `advance`; then it hints the next one. 0: off.
    handoff_s: float = 0.0
    _handoff: str | None = field(default=None, init=False, repr=False)
    # The newest view of the run being advanced that the store wrote, or the driver took
    # from a step: what a bug's INTERNAL_ERROR ending and the release start from.
    _latest: RunView | None = field(default=None, init=False, repr=False)

    def advance(self, run_id: str) -> None:
        """Do the run's next pieces of work until it waits, pauses or ends; with handoff,
        then the same for the runs this worker took over on the way."""
        until = self.clock.now() + timedelta(seconds=self.handoff_s)
        next_id: str | None = run_id
        while next_id is not None:
            self._handoff = None
            try:
                self._advance_one(next_id)
            except BaseException:
                if self._handoff is not None:
                    self._pass_on(self._handoff)  # the next run goes to any worker
                raise
            next_id, self._handoff = self._handoff, None
            if next_id is not None and self.clock.now() >= until:
                self._pass_on(next_id)  # time to let other runs have this worker
                next_id = None

    def _pass_on(self, run_id: str) -> None:
        """Hand a run this worker took over to any worker instead."""
        with contextlib.suppress(Exception):  # else its lease expires and the sweeper hints
            self.store.let_go(run_id)
        self.enqueue(run_id)

    def _advance_one(self, run_id: str) -> None:
        """Claim the run and drive it; a lost lease stops without writing, and a bug ends
        the run INTERNAL_ERROR rather than leaving it RUNNING."""
        claimed = self._latest = self.store.claim(run_id)
        if claimed is None:
            return
        try:
            try:
                self._drive(claimed)
            except LimitReached as limit:  # a call's limit raised as such (RecordingModel)
                endings.limit_reached(self, self._latest or claimed, limit)
        except LeaseLost as lost:
            if lost.wake is not None:
                self.enqueue(lost.wake)
            return  # the run is another worker's now; it carries on from what was recorded
        except Exception as exc:  # a bug must not leave the run RUNNING forever
            run = self._latest or claimed
            if run.status not in TERMINAL:
                with contextlib.suppress(LeaseLost):
                    endings.fail(
                        self, run, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", Events(), []
                    )
            raise
        finally:
            self.store.release(self._latest or claimed)
            self._latest = None

    def _drive(self, run: RunView) -> RunView:
        """The loop: resume from a decision, start, then one step (or group) after another
        until the run waits, pauses, ends, or has taken `max_steps_per_advance` steps.
        Each step answers the run's next view, which the loop goes on from."""
        if run.status in TERMINAL:
            return run
        if run.cancel_requested:
            return endings.cancel(self, run)
        run = self._resumed(run)
        if run.state.get(hitl.AWAITING_KEY):
            run, going_on = checkpoints.resume_decision(self, run)
            if not going_on:
                return run
        if run.status == "PENDING":
            run, going_on = start.start_run(self, run)
            if not going_on:
                return run
        for _ in range(self.max_steps_per_advance):
            self._latest = run
            run, going_on = self._next(run)
            if not going_on:
                return run
        run = self._commit(run.changed(status="RUNNING"), Save()).run
        self.enqueue(run.id)  # a long plan yields the worker, then goes on
        return run

    def _resumed(self, run: RunView) -> RunView:
        """The run as a claim after a person's decision goes on with it."""
        if run.state.get(hitl.REPLAY_KEY):
            # Resuming after a person's decision replays the step up to its checkpoint: its
            # model calls were recorded before the pause and are reused, not paid again.
            run = run.without_state(hitl.REPLAY_KEY).changed(resumed=True)
        if run.state.get(hitl.LOCKED_KEY):
            run = run.changed(definition=hitl.with_locked(run.definition, run.state))
        if RESTART_AT_KEY in run.state and run.status == "RUNNING":
            run = endings.resume_pass(run)  # a person gave it more passes
        return run

    def _next(self, run: RunView) -> tuple[RunView, bool]:
        """One turn of the loop: join children, end a pass, or run the next step or group;
        False when the run stops here (it ended, waits, or goes on in another `advance`)."""
        if run.status == "WAITING":
            if endings.expired(self, run):
                return endings.timeout(self, run), False
            if delegating.waiting(run):  # on subordinates its reasoning loop hired
                return delegating.join(self, run)
            return children.join(self, run)
        group = plans.group_at(run.plan or [], run.cursor)
        if not group:
            return endings.complete(self, run)  # True: another pass of the plan
        signals = self.store.signals(run, cancel=True)
        run = signals.run
        if signals.cancel_requested:
            return endings.cancel(self, run), False  # the step in flight finished
        if endings.expired(self, run):
            return endings.timeout(self, run), False
        run, going_on = checkpoints.custom_checkpoints(self, run, group[0])
        if not going_on:
            return run, False
        run, going_on = checkpoints.spawn_checkpoint(self, run, group)
        if not going_on:
            return run, False
        if run.planned()[group[0]]["type"] not in plans.STARTS_A_RUN:
            return self._run_step(run, group[0])
        run, started = children.start_children(self, run, group)
        if started is None:
            return run, True  # every child was skipped
        if isinstance(started, WaitingOnChildren):
            self._hint_children(started)
        elif isinstance(started, OverBudget):
            run = endings.limit_reached(self, run, started.limit)
        return run, False

    def _commit(self, run: RunView, transition: Transition) -> Committed:
        """Commit a transition of the run; the store's answer carries the run as written."""
        self._latest = run
        done = self.store.commit(run, transition)
        self._latest = done.run
        return done

    def _record(self, run: RunView, record: Record) -> RunView:
        """Record a call (or a verdict, a memory item); the run as written."""
        self._latest = run
        self._latest = self.store.record(run, record)
        return self._latest

    def _later(self, run: RunView, steps: list[StepRecord], events: Events) -> RunView:
        """Buffer records for the store's next write of this run (each write takes them).
        Safe because every model and tool call is recorded at once, in its own commit: a
        replay after a crash reuses them instead of paying again."""
        self._latest = run.buffered(steps, events.items)
        return self._latest

    def _data(self, run: RunView) -> dict[str, Any]:
        return plans.logic_data(run.state, run.input, run.iteration)

    def _go_on(
        self,
        run: RunView,
        step: dict[str, Any],
        position: int,
        events: Events,
        steps: list[StepRecord],
    ) -> RunView:
        """After a step: follow its exit conditions, else the next step; persist."""
        target = plans.next_index(run.planned(), step, self._data(run))
        if target == "END":
            run = run.at(len(run.planned()))
            events.add("step.exit", step=step["name"], to="END")
        elif target == "ESCALATE":
            events.add("step.exit", step=step["name"], to="ESCALATE")
            reason = f"an exit condition of step {step['name']!r} escalates to a person"
            output = run.state.get(step["name"])
            schema = (
                run.definition["io_contract"]["output"]["schema"]
                if step["type"] == "THOUGHT"
                else None
            )
            run, _ = checkpoints.ask_person(
                self,
                run,
                hitl.default_checkpoint(run.definition, "EXIT_ESCALATE", reason),
                checkpoints.Question(
                    key=f"EXIT:{step['key']}:{run.iteration}:{run.attempt}",
                    step_name=step["name"],
                    subject="output",
                    payload=output,
                    edit_schema=schema,
                    reasoning=f"{reason}. Approve to go on with its output, edit the output, or "
                    "reject to end the run.",
                    risk=[("medium", reason)],
                ),
                steps=steps,
                events=events,
                awaiting={"position": position},
            )
            return run
        elif isinstance(target, int) and target <= position:
            return endings.jump_back(self, run, step, target, events, steps)
        elif isinstance(target, int):
            run = run.at(target)
            events.add("step.exit", step=step["name"], to=run.planned()[target]["name"])
        else:
            run = run.at(position + 1)
        upcoming = run.planned()[run.cursor] if run.cursor < len(run.planned()) else None
        if upcoming is None or upcoming["type"] in plans.STARTS_A_RUN:
            # The run ends or starts children next: that write carries this step.
            return self._later(run, steps, events)
        return self._commit(run, Save(steps, events)).run

    def _run_step(self, run: RunView, position: int) -> tuple[RunView, bool]:
        """Run the THOUGHT or TOOL_CALL step at `position` and act on its outcome: False
        when the run stops here (it ended, waits, or goes on in another `advance`)."""
        step = run.planned()[position]
        record = StepRecord(
            step["key"],
            position,
            step["name"],
            step["type"],
            "RUNNING",
            run.iteration,
            attempt=run.attempt,
            started_at=self.clock.now(),
        )
        events = Events()
        events.add("step.started", step=step["name"], type=step["type"])
        outcome: Completed | Failed | OverBudget | NeedsApproval | WaitingOnChildren
        if step["type"] == "TOOL_CALL":
            run, record, outcome = tool_steps.tool_step(self, run, step, record)
        else:
            run, record, outcome = thoughts.thought_step(self, run, step, record)
        if isinstance(outcome, Completed):
            output = outcome.output
            steps = [record.completed(output)]
            if step_review.reviews_steps(run.definition):
                run, verdict, kept = step_review.review_results(
                    self, run, [(position, output)], events, steps
                )
                if verdict != step_review.PASSED:
                    return run, verdict == step_review.AGAIN
                output = kept[0]  # a person may have edited it
                steps[0] = record.completed(output)
            run = self._new_state(run, step, output, events)
            events.add("step.finished", step=step["name"], status="COMPLETED")
            run = self._go_on(run, step, position, events, steps)
            return run, run.status == "RUNNING"
        if isinstance(outcome, OverBudget):
            # No room for the step's next call: it waits with the run (BLOCKED), or fails.
            limit = outcome.limit
            record = record.failed(limit.code, str(limit))
            if limit.blocks:
                record = record.waiting()
            else:
                events.add("step.finished", step=step["name"], status="FAILED", error=limit.code)
            run = self._later(run, [record], events)
            return endings.limit_reached(self, run, limit), False
        if isinstance(outcome, NeedsApproval):
            return run, False  # the run waits on a person; the decision hands it back
        if isinstance(outcome, WaitingOnChildren):  # its reasoning loop hired
            self._hint_children(outcome)
            return run, False
        return self._step_failed(run, step, position, record, events, outcome)

    def _step_failed(
        self,
        run: RunView,
        step: dict[str, Any],
        position: int,
        record: StepRecord,
        events: Events,
        failure: Failed,
    ) -> tuple[RunView, bool]:
        """A failed step: a rate limit's wait, the retry policy's next attempt, a re-plan
        after a person's rejection (ALTERNATIVE_PATH), the ON_FAILURE checkpoint, or the
        run fails."""
        record = record.failed(failure.code, failure.message)
        if failure.retry_after_s is not None:
            # A rate limit: the same attempt runs again when the limit has room; the
            # retry policy's attempts are for failures, not for waiting one's turn.
            delay = max(failure.retry_after_s, 0.05)
            record = record.waiting()
            events.add("step.rate_limited", step=step["name"], delay_s=round(delay, 3))
            # The same attempt replays the step: the calls it recorded before are reused.
            run = run.with_state(**{hitl.REPLAY_KEY: True})
            return self._schedule(run, RetryAt(delay), [record], events), False
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
            run = run.changed(attempt=decision.attempt)
            events.add(
                "step.retry", step=step["name"], attempt=decision.attempt, delay_s=decision.delay_s
            )
            return self._schedule(run, RetryAt(decision.delay_s), [record], events), False
        message = f"step {step['name']!r}: {failure.message}"
        if record.attempt > 1:
            message += f" (after {record.attempt} attempts; {decision.reason})"
        if failure.code == REJECTED and start.takes_alternative_path(run):
            run = self._later(run, [record], events)
            feedback = f"A person rejected step {step['name']!r}: {failure.message}"
            run, replanned = start.replan(self, run, feedback, events)
            if isinstance(replanned, OverBudget):
                return endings.limit_reached(self, run, replanned.limit), False
            return run, replanned
        run, asked = checkpoints.on_failure_checkpoint(
            self, run, step, position, failure.code, message, events, [record]
        )
        if asked is None:
            run = endings.fail(self, run, failure.code, message, events, [record])
        return run, False

    def _hint_children(self, waiting: WaitingOnChildren) -> None:
        """Have the children started advanced: with handoff, this worker goes on with the
        first one it holds; the others go to any worker."""
        for child_id in waiting.child_ids:
            if self._handoff is None and child_id == waiting.taken:
                self._handoff = child_id  # this worker goes on with it
            else:
                self.enqueue(child_id)

    def _schedule(
        self, run: RunView, at: RetryAt, steps: list[StepRecord], events: Events
    ) -> RunView:
        """Persist the run to be advanced again `at.delay_s` from now (it stops here)."""
        run = self._commit(run, Schedule(at.delay_s, steps, events)).run
        self.enqueue_later(run.id, at.delay_s)
        return run

    def _new_state(
        self, run: RunView, step: dict[str, Any], output: Any, events: Events
    ) -> RunView:
        """A step's output lands in the state (a child's, at the top level only where it
        declares `state_contract.writes_to`); an entity that audits COMPREHENSIVEly and
        logs state changes gets a `state.changed` event naming the keys that changed."""
        before = run.state
        only = run.state[WRITES_KEY].get(step["key"]) if WRITES_KEY in run.state else None
        run = run.changed(state=plans.apply_output(run.state, step["name"], output, only))
        oversight = run.definition["governance"]["human_oversight"]
        logging = run.definition["observability"]["logging"]
        if oversight.get("audit_level") == "COMPREHENSIVE" and logging.get(
            "log_state_changes", True
        ):
            changed = sorted(k for k, v in run.state.items() if k not in before or before[k] != v)
            events.add("state.changed", step=step["name"], keys=changed)
        return run


# What the rest of the product imports from here (runs/store.py, runs/services.py, tests,
# bench); each lives in state, limits, ports or validators.
__all__ = [
    "Engine",
    "RunView",
    "RunStore",
    "LimitReached",
    "BUDGET_EXHAUSTED",
    "LIMIT_EXCEEDED",
    "child_step_key",
    "TERMINAL",
    "ChildOutcome",
    "ChildRequest",
    "Events",
    "LeaseLost",
    "LimitRow",
    "StepRecord",
    "budget_blocks",
    "first_limit_hit",
    "lifetime_limit",
    "lifetime_used",
    "no_room_for_children",
    "run_limits",
    "schema_problems",
    "input_problems",
]
