"""Reviewing each step's result (`review_mechanism.scope: EACH_STEP`), on both stores: every
step's result is checked as it finishes, before the plan goes on (seed 000 §4.1); a result
that fails is retried, sent to a person, re-planned or ends the run as `on_failure` says;
the output is then not reviewed a second time. OUTPUT, the default, keeps today's review
of the output at the end of each pass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from approvals.services import DecisionRefused
from runs.engine.review import REVIEW_FUNCTIONS, review_function
from tests.support.runs import step
from tests.support.worlds import World, io


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


NEVER = {"criterion": "says never", "validation_type": "REGEX", "validator": "^never$"}
ANYTHING = {"criterion": "says something", "validation_type": "REGEX", "validator": "."}


def regex(pattern: str) -> dict[str, Any]:
    return {"criterion": f"matches {pattern}", "validation_type": "REGEX", "validator": pattern}


def reviewing(
    *criteria: dict[str, Any], on_failure: str = "RETRY", max_retries: int = 2, scope: str = ""
) -> dict[str, Any]:
    mechanism: dict[str, Any] = {
        "enabled": True,
        "on_failure": on_failure,
        "success_criteria": list(criteria),
        "scope": scope or "EACH_STEP",
    }
    return {
        "review_mechanism": mechanism,
        "retry_policy": {"max_retries": max_retries, "backoff_strategy": "NONE"},
    }


def two_steps(world: World, *criteria: dict[str, Any], **review: Any) -> str:
    return world.add(
        "writer",
        "SKILL",
        io_contract=io(None, text="string"),
        logic_gate=reviewing(*criteria, **review),
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [step(1, "Draft", "THOUGHT"), step(2, "Polish", "THOUGHT")],
            }
        },
    )


def one_step(world: World, *criteria: dict[str, Any], **review: Any) -> str:
    return world.add(
        "answerer",
        "SKILL",
        io_contract=io(None, text="string"),
        logic_gate=reviewing(*criteria, **review),
        planning={"static_plan": {"enabled": True, "steps": [step(1, "Answer", "THOUGHT")]}},
    )


def children_of(world: World, relationship: str, *criteria: dict[str, Any], **review: Any) -> str:
    """`team` runs child `a` (it answers {alpha}) then `b` (it answers {beta})."""
    world.add("a", io_contract=io(None, alpha="string"))
    world.add("b", io_contract=io(None, beta="string"))
    return world.add(
        "team",
        "AGENT",
        io_contract=io(None, alpha="string", beta="string"),
        children=[
            {"child_id": "a", "relationship": relationship},
            {"child_id": "b", "relationship": relationship},
        ],
        logic_gate=reviewing(*criteria, **review),
    )


def test_each_steps_result_is_reviewed_and_the_output_not_again(world):
    two_steps(world, ANYTHING)
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [
        ("Draft", 1, "COMPLETED"),
        ("Review of Draft", 1, "COMPLETED"),
        ("Polish", 1, "COMPLETED"),
        ("Review of Polish", 1, "COMPLETED"),
    ]
    assert [e["step"] for e in world.events_of(run, "review.passed")] == ["Draft", "Polish"]


def test_the_output_scope_reviews_the_output_once_at_the_end(world):
    two_steps(world, ANYTHING, scope="OUTPUT")
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    names = [name for name, _, _ in world.step_statuses(run)]
    assert names == ["Draft", "Polish", "Review"]


def test_a_result_that_keeps_failing_is_retried_then_fails_the_run_naming_the_step(world):
    two_steps(world, NEVER, on_failure="RETRY", max_retries=2)
    run = world.run("writer", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert "the result of step 'Draft' failed its review" in message
    assert "says never" in message and "after 3 attempts" in message
    assert world.step_statuses(run) == [
        ("Draft", 1, "COMPLETED"),
        ("Review of Draft", 1, "FAILED"),
        ("Draft", 2, "COMPLETED"),
        ("Review of Draft", 2, "FAILED"),
        ("Draft", 3, "COMPLETED"),
        ("Review of Draft", 3, "FAILED"),
    ]
    assert world.model_call_count(run) == 3  # Polish never ran


@pytest.fixture
def fails_once() -> Iterator[list[Any]]:
    """A FUNCTION criterion that fails the first result it sees, then passes."""
    seen: list[Any] = []

    @review_function("fails_once")
    def check(output: Any) -> str | None:
        seen.append(output)
        return "not good enough yet" if len(seen) == 1 else None

    yield seen
    REVIEW_FUNCTIONS.pop("fails_once", None)


def test_a_retried_step_sees_why_and_the_plan_goes_on_once_it_passes(world, fails_once):
    criterion = {
        "criterion": "good enough",
        "validation_type": "FUNCTION",
        "validator": "fails_once",
    }
    two_steps(world, criterion, on_failure="RETRY")
    run = world.run("writer", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [
        ("Draft", 1, "COMPLETED"),
        ("Review of Draft", 1, "FAILED"),
        ("Draft", 2, "COMPLETED"),
        ("Review of Draft", 2, "COMPLETED"),
        ("Polish", 1, "COMPLETED"),
        ("Review of Polish", 1, "COMPLETED"),
    ]
    assert "not good enough yet" in world.prompts(run)[1]  # Draft's second attempt
    assert "not good enough yet" not in world.prompts(run)[0]
    retries = world.events_of(run, "step.retry")
    assert [(e["step"], e["attempt"], e["reason"]) for e in retries] == [("Draft", 2, "review")]


def test_abort_ends_the_run_at_the_first_failed_result(world):
    two_steps(world, NEVER, on_failure="ABORT")
    run = world.run("writer", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert message.startswith("the result of step 'Draft' failed its review")
    assert world.model_call_count(run) == 1


def test_escalate_asks_a_person_about_the_result_and_approval_goes_on(world):
    one_step(world, NEVER, on_failure="ESCALATE")
    run = world.run("answerer", {})

    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["step"], asked["subject"]) == (
        "REVIEW_ESCALATE",
        "Answer",
        "output",
    )
    answered = asked["payload"]
    assert set(answered) == {"text"}

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == answered
    assert world.model_call_count(run) == 1  # the step's call was replayed, not paid again
    assert world.step_statuses(run) == [
        ("Answer", 1, "COMPLETED"),
        ("Review of Answer", 1, "COMPLETED"),
    ]


def test_a_person_may_edit_the_result_or_reject_it(world):
    one_step(world, NEVER, on_failure="ESCALATE")
    edited = world.run("answerer", {})
    world.decide(edited, "edit", payload={"text": "what a person wrote"})
    world.advance_all()
    assert world.status(edited) == "COMPLETED", world.error(edited)
    assert world.output(edited) == {"text": "what a person wrote"}
    assert world.events_of(edited, "output.edited")[0]["step"] == "Answer"

    rejected = world.run("answerer", {})
    world.decide(rejected, "reject", notes="off topic")
    world.advance_all()
    assert world.status(rejected) == "FAILED"
    code, message = world.error(rejected)
    assert code == "REJECTED"
    assert "the result of step 'Answer' was rejected" in message and "off topic" in message


def test_an_edit_that_breaks_the_schema_never_becomes_the_result(world):
    """The inbox refuses such an edit (the ORM store's decision checks it against the
    request's schema, and the run waits on); should one reach the engine, the run fails
    naming the problem rather than going on with it."""
    one_step(world, NEVER, on_failure="ESCALATE")
    run = world.run("answerer", {})
    try:
        world.decide(run, "edit", payload={"text": 42})
    except DecisionRefused as refused:
        assert "42 is not of type 'string'" in str(refused)
        assert world.status(run) == "PAUSED"
        return
    world.advance_all()
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert message.startswith("the edited result of step 'Answer'")


def test_each_childs_output_is_reviewed_before_it_lands_in_the_state(world):
    children_of(world, "SEQUENTIAL", regex('"(alpha|beta)"'))
    run = world.run("team", {})

    assert world.status(run) == "COMPLETED", world.error(run)
    reviewed = [e["step"] for e in world.events_of(run, "review.passed")]
    assert len(reviewed) == 2
    assert set(world.output(run)) == {"alpha", "beta"}


def test_a_failing_childs_result_runs_the_child_again_then_fails(world):
    children_of(world, "SEQUENTIAL", regex('"beta"'), on_failure="RETRY", max_retries=1)
    run = world.run("team", {})

    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "VALIDATION_ERROR"
    assert "after 2 attempts" in message
    names = sorted(world.entity_name(child) for child in world.children(run))
    assert names == ["a", "a"]  # b never started


def test_a_parallel_group_waits_on_a_person_and_is_joined_not_started_again(world):
    children_of(world, "PARALLEL", regex('"alpha"'), on_failure="ESCALATE")
    run = world.run("team", {})

    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert set(asked["payload"]) == {"beta"}  # a passed; b's result went to a person

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert set(world.output(run)) == {"alpha", "beta"}
    assert sorted(world.entity_name(child) for child in world.children(run)) == ["a", "b"]
