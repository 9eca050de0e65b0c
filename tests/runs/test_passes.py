"""The end of a pass in the engine: transformations, review with its four on_failure modes,
loop control with convergence and the hard cap, and dynamic planning reconciled with the
static plan. Real gateway (offline model through litellm), ORM store."""

from __future__ import annotations

import pytest

from approvals.models import Approval
from runs.engine.review import REVIEW_FUNCTIONS, review_function
from runs.models import LLMCall, Run, RunEvent, StepRun
from tests.factories import EntityFactory
from tests.support.queued_runs import Driver
from tests.support.runs import io, static_plan, step

pytestmark = pytest.mark.smoke


def _has_long_summary(output: dict) -> str | None:
    return None if len(output.get("summary", "")) > 10_000 else "the summary is too short"


def _always_passes(output: dict) -> str | None:
    return None


@pytest.fixture(autouse=True)
def review_functions():
    """Functions registered for these tests only; the registry is left as it was."""
    added = {"test_has_long_summary": _has_long_summary, "test_always_passes": _always_passes}
    for name, function in added.items():
        review_function(name)(function)
    yield
    for name in added:
        REVIEW_FUNCTIONS.pop(name, None)


def reviewed(acme, name: str, on_failure: str, validator: str, **logic_gate):
    return EntityFactory(
        workspace=acme,
        name=name,
        io_contract=io(None, summary="string"),
        logic_gate={
            "review_mechanism": {
                "enabled": True,
                "on_failure": on_failure,
                "success_criteria": [
                    {
                        "criterion": "long enough",
                        "validation_type": "FUNCTION",
                        "validator": validator,
                    }
                ],
            },
            "retry_policy": {"max_retries": 2, "backoff_strategy": "NONE"},
            **logic_gate,
        },
    )


def test_output_transformations_apply_before_validation(db, acme):
    contract = io(None, title="string")
    contract["output"]["transformations"] = [{"field": "title", "transform": "upper"}]
    action = EntityFactory(workspace=acme, name="shout", io_contract=contract)
    run = Driver().run(action, {})
    assert run.status == "COMPLETED"
    assert run.output_data["title"] == run.output_data["title"].upper()


def test_an_unknown_transformation_fails_the_run_naming_it(db, acme):
    contract = io(None, title="string")
    contract["output"]["transformations"] = [{"field": "title", "transform": "sparkle"}]
    action = EntityFactory(workspace=acme, name="sparkly", io_contract=contract)
    run = Driver().run(action, {})
    assert run.status == "FAILED"
    assert run.error_code == "VALIDATION_ERROR"
    assert "sparkle" in run.error_message


def test_a_passing_review_is_recorded_as_a_step(db, acme):
    action = reviewed(acme, "fine", "ABORT", "test_always_passes")
    run = Driver().run(action, {})
    assert run.status == "COMPLETED"
    review = StepRun.objects.get(run=run, type="REVIEW")
    assert review.status == "COMPLETED"
    assert review.output["passed_criteria"] == ["long enough"]


def test_a_failed_review_with_abort_fails_the_run(db, acme):
    action = reviewed(acme, "aborting", "ABORT", "test_has_long_summary")
    run = Driver().run(action, {})
    assert run.status == "FAILED"
    assert run.error_code == "VALIDATION_ERROR"
    assert "the summary is too short" in run.error_message


def test_a_failed_review_with_retry_runs_new_passes_up_to_max_retries(db, acme):
    action = reviewed(acme, "retrying", "RETRY", "test_has_long_summary")
    run = Driver().run(action, {})
    assert run.status == "FAILED"
    assert "after 2 retries" in run.error_message
    # Three passes: the first and two retries, each with its own model call.
    assert LLMCall.objects.filter(run=run).count() == 3
    assert sorted(
        StepRun.objects.filter(run=run, type="REVIEW").values_list("iteration", flat=True)
    ) == [1, 2, 3]
    assert run.state["review_feedback"].endswith("the summary is too short")


def test_a_failed_review_with_escalate_stops_for_a_human(db, acme):
    action = reviewed(acme, "escalating", "ESCALATE", "test_has_long_summary")
    run = Driver().run(action, {})
    assert run.status == "PAUSED"
    request = Approval.objects.get(run=run)
    assert (request.checkpoint_trigger, request.status, request.subject) == (
        "REVIEW_ESCALATE",
        "PENDING",
        "output",
    )
    assert request.payload == run.output_data


def test_an_llm_judge_review_is_a_recorded_model_call(db, acme):
    action = EntityFactory(
        workspace=acme,
        name="judged",
        io_contract=io(None, summary="string"),
        logic_gate={
            "review_mechanism": {
                "enabled": True,
                "on_failure": "ABORT",
                "review_prompt": "Is this a good summary? {output}",
                "success_criteria": [
                    {"criterion": "judge", "validation_type": "LLM_JUDGE", "validator": "be fair"}
                ],
            }
        },
    )
    run = Driver().run(action, {})
    assert run.status in ("COMPLETED", "FAILED")
    judge = LLMCall.objects.get(run=run, metadata__step="review")
    assert "Is this a good summary?" in judge.input_prompt
    review = StepRun.objects.get(run=run, type="REVIEW")
    assert review.output["judge"]["decision"] in ("approve", "retry", "escalate")
    assert (run.status == "COMPLETED") == (review.output["judge"]["decision"] == "approve")


def test_a_loop_stops_when_its_criteria_converge(db, acme):
    action = EntityFactory(
        workspace=acme,
        name="converging",
        io_contract={
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"score": {"type": "number", "minimum": 0.9, "maximum": 1}},
                    "required": ["score"],
                }
            }
        },
        planning={
            "loop_control": {
                "max_iterations": 5,
                "convergence_criteria": [{"metric": "score", "threshold": 0.9, "operator": "GTE"}],
            }
        },
    )
    run = Driver().run(action, {})
    assert run.status == "COMPLETED"
    assert run.iteration == 1
    assert LLMCall.objects.filter(run=run).count() == 1


def test_a_loop_that_never_converges_blocks_at_the_global_hard_cap(db, acme):
    """Out of passes without converging, the run waits for a person (on_exhausted BLOCK, the
    default): not a silent success. Its last pass's output is kept."""
    action = EntityFactory(
        workspace=acme,
        name="endless",
        io_contract={
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 0.5}},
                    "required": ["score"],
                }
            }
        },
        planning={
            "loop_control": {
                "max_iterations": None,
                "convergence_criteria": [{"metric": "score", "threshold": 0.9, "operator": "GTE"}],
            }
        },
    )
    driver = Driver()
    driver.engine.hard_cap = 4
    run = driver.run(action, {})
    assert run.status == "BLOCKED"
    assert run.error_code == "MAX_PASSES_EXHAUSTED"
    assert "4 of 4 passes ran" in run.error_message
    assert f"score is {run.output_data['score']:g}, not GTE 0.9" in run.error_message
    assert run.iteration == 4
    assert 0 <= run.output_data["score"] <= 0.5
    assert LLMCall.objects.filter(run=run).count() == 4
    stopped = RunEvent.objects.get(run=run, type="loop.stopped")
    assert stopped.payload["reason"] == "max_passes_exhausted"
    assert len(run.state["_iterations"]) == 4


def test_a_dynamic_plan_is_reconciled_and_required_steps_kept(db, acme):
    first = EntityFactory(workspace=acme, name="gather", io_contract=io(None, facts="string"))
    second = EntityFactory(workspace=acme, name="write", io_contract=io(None, text="string"))
    agent = EntityFactory(
        workspace=acme,
        name="planner",
        type="AGENT",
        children=[first, second],
        planning={
            **static_plan(
                step(1, "Gather", "CHILD_ENTITY_INVOCATION", entity_id="gather"),
                step(2, "Write", "CHILD_ENTITY_INVOCATION", entity_id="write"),
            ),
            "dynamic_planning": {
                "enabled": True,
                "planning_prompt": "Decide the steps.",
                "reconciliation_strategy": "HYBRID",
                "allowed_deviations": {"can_add_steps": True},
            },
        },
        io_contract=io(None, text="string"),
    )
    run = Driver().run(agent, {})
    assert run.status == "COMPLETED", run.error_message
    plan_names = [s["name"] for s in run.dynamic_plan]
    assert "Gather" in plan_names and "Write" in plan_names
    assert plan_names.index("Gather") < plan_names.index("Write")
    assert LLMCall.objects.filter(run=run, purpose="PLAN").count() == 1
    reconciled = RunEvent.objects.get(run=run, type="plan.reconciled")
    assert isinstance(reconciled.payload["notes"], list)
    assert {c.entity.name for c in Run.objects.filter(parent=run)} == {"gather", "write"}
