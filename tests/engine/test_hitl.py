"""Human in the loop, the engine's side, on both stores (the in-memory one and the ORM's):
every checkpoint pauses the run, and each decision (approve, edit, reject, lock a
constraint) and each timeout action (PROCEED, ABORT, ESCALATE) has its effect."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import tool_definition
from tests.support.runs import step
from tests.support.worlds import MemoryWorld, OrmWorld, World, io, limits, render_tool


@pytest.fixture(params=["memory", pytest.param("orm", marks=pytest.mark.django_db)])
def world(request: pytest.FixtureRequest) -> World:
    if request.param == "memory":
        return MemoryWorld()
    return OrmWorld(request.getfixturevalue("acme"))


TEXT_OUT = {"output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}


def oversight(*checkpoints: dict[str, Any], **rails: Any) -> dict:
    governance: dict[str, Any] = {
        "human_oversight": {"hitl_checkpoints": list(checkpoints)},
        **limits(),
    }
    if rails:
        governance["safety_rails"] = rails
    return governance


def checkpoint(trigger: str, **options: Any) -> dict:
    return {"trigger": trigger, **options}


def render_from(template: Any, name: str = "Render") -> dict:
    each = step(1, name, "TOOL_CALL", tool_id="render")
    each["input_mapping"] = {"template": template, "variables": {}}
    return {"static_plan": {"enabled": True, "steps": [each]}}


def renderer(world, name: str, *checkpoints: dict, template: Any = "hello", **extra: Any) -> str:
    return world.add(
        name,
        tools=[render_tool()],
        planning=render_from(template),
        io_contract={**io({"greeting": "string"}), **TEXT_OUT}
        if isinstance(template, dict)
        else TEXT_OUT,
        governance=oversight(*checkpoints, **extra.pop("rails", {})),
        **extra,
    )


# -- BEFORE_EXECUTION -------------------------------------------------------------------------


def test_before_execution_pauses_before_anything_runs_and_approval_lets_it_run(world):
    renderer(world, "guarded", checkpoint("BEFORE_EXECUTION"))
    run = world.run("guarded", {})

    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["status"], asked["subject"]) == (
        "BEFORE_EXECUTION",
        "PENDING",
        "input",
    )
    assert world.call_counts(run) == (0, 0)
    assert "approval.requested" in world.event_types(world.trace(run))

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "hello"}
    assert world.approvals(run)[0]["status"] == "APPROVED"


def test_a_notification_only_checkpoint_records_the_request_and_does_not_pause(world):
    renderer(world, "told", checkpoint("BEFORE_EXECUTION", approval_required=False))
    run = world.run("told", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    (noted,) = world.approvals(run)
    assert (noted["trigger"], noted["status"]) == ("BEFORE_EXECUTION", "NOTIFIED")
    assert "approval.noted" in world.event_types(world.trace(run))


def test_an_edited_input_is_what_the_run_starts_from(world):
    renderer(world, "greeter", checkpoint("BEFORE_EXECUTION"), template={"var": "greeting"})
    run = world.run("greeter", {"greeting": "hi"})
    world.decide(run, "edit", payload={"greeting": "good morning"})
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "good morning"}


def test_a_rejected_start_fails_the_run_with_rejected_and_the_feedback(world):
    renderer(world, "refused", checkpoint("BEFORE_EXECUTION"))
    run = world.run("refused", {})
    world.decide(run, "reject", notes="not during the freeze", by="zoe")
    world.advance_all()
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "REJECTED"
    assert "rejected by zoe" in message and "not during the freeze" in message
    assert world.call_counts(run) == (0, 0)


# -- BEFORE_TOOL_CALL -------------------------------------------------------------------------


def test_edited_tool_arguments_are_what_the_tool_is_called_with(world):
    renderer(world, "careful", checkpoint("BEFORE_TOOL_CALL"))
    run = world.run("careful", {})
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert asked["subject"] == "tool_arguments"
    assert asked["payload"] == {"template": "hello", "variables": {}}
    assert asked["step"] == "Render"
    assert world.call_counts(run) == (0, 0)

    world.decide(run, "edit", payload={"template": "edited by a person", "variables": {}})
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "edited by a person"}
    assert world.call_counts(run) == (0, 1)


def test_a_rejected_tool_call_is_never_made(world):
    renderer(world, "vetoed", checkpoint("BEFORE_TOOL_CALL"))
    run = world.run("vetoed", {})
    world.decide(run, "reject", notes="wrong template")
    world.advance_all()
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "REJECTED"
    assert "wrong template" in world.error(run)[1]
    assert world.call_counts(run) == (0, 0)


def test_a_checkpoint_condition_decides_whether_it_asks(world):
    only_hi = {"==": [{"var": "tool.arguments.template"}, "hi"]}
    renderer(world, "quiet", checkpoint("BEFORE_TOOL_CALL", condition=only_hi))
    run = world.run("quiet", {})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.approvals(run) == []


def test_resuming_reuses_the_model_call_that_chose_the_arguments(world):
    each = step(1, "Render", "TOOL_CALL", tool_id="render")  # no mapping: the model fills it
    world.add(
        "chosen",
        tools=[render_tool()],
        planning={"static_plan": {"enabled": True, "steps": [each]}},
        governance=oversight(checkpoint("BEFORE_TOOL_CALL")),
    )
    run = world.run("chosen", {})
    assert world.call_counts(run) == (1, 0)
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.call_counts(run) == (1, 1)  # the model was not asked again


def test_a_locked_constraint_binds_the_rest_of_the_run(world):
    renderer(world, "locked", checkpoint("BEFORE_TOOL_CALL"))
    run = world.run("locked", {})
    world.decide(
        run,
        "lock_constraint",
        constraint={"constraint": "Do not render anything", "forbid_tools": ["render"]},
    )
    world.advance_all()
    assert world.status(run) == "FAILED"
    assert world.error(run) == (
        "PERMISSION_DENIED",
        "step 'Render': a constraint a person locked forbids calling render: "
        "Do not render anything",
    )
    assert world.events_of(run, "constraint.locked")[0]["constraint"] == "Do not render anything"
    assert world.call_counts(run) == (0, 0)


def test_a_constraint_locked_in_a_parent_reaches_its_children(world):
    world.add("thinker")  # one THOUGHT step: the model is told of the locked constraint
    renderer(world, "child_renderer")
    world.add(
        "lead",
        "AGENT",
        children=["thinker", "child_renderer"],
        governance=oversight(checkpoint("BEFORE_EXECUTION")),
    )
    run = world.run("lead", {})
    world.decide(
        run, "lock_constraint", constraint={"constraint": "No renders", "forbid_tools": ["render"]}
    )
    world.advance_all()
    thinker, renderer_run = world.children(run)
    assert world.entity_name(thinker) == "thinker"
    assert world.status(thinker) == "COMPLETED", world.error(thinker)
    [prompt] = world.prompts(thinker)
    assert "No renders" in prompt
    assert world.status(renderer_run) == "FAILED"
    assert "No renders" in world.error(renderer_run)[1]
    assert world.call_counts(renderer_run) == (0, 0)
    assert world.status(run) == "FAILED"


# -- timeouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "status", "code"),
    [("PROCEED", "COMPLETED", ""), ("ABORT", "FAILED", "TIMEOUT")],
)
def test_a_timeout_proceeds_or_aborts_as_the_checkpoint_says(world, action, status, code):
    renderer(world, "timed", checkpoint("BEFORE_TOOL_CALL", timeout_action=action, timeout_ms=1000))
    run = world.run("timed", {})
    world.time_out(run)
    world.advance_all()
    assert world.status(run) == status, world.error(run)
    assert world.error(run)[0] == code
    assert world.approvals(run)[0]["status"] == "TIMEOUT"


def test_an_escalating_timeout_hands_the_request_on_then_ends_the_run(world):
    renderer(
        world,
        "escalates",
        checkpoint("BEFORE_TOOL_CALL", timeout_action="ESCALATE", timeout_ms=1000),
    )
    run = world.run("escalates", {})
    world.time_out(run)
    world.advance_all()
    assert world.status(run) == "PAUSED"
    assert world.approvals(run)[0]["status"] == "ESCALATED"

    world.time_out(run)
    world.advance_all()
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "TIMEOUT"


def test_an_escalated_request_can_still_be_approved(world):
    renderer(
        world, "rescued", checkpoint("BEFORE_TOOL_CALL", timeout_action="ESCALATE", timeout_ms=1000)
    )
    run = world.run("rescued", {})
    world.time_out(run)
    world.decide(run, "approve", by="root")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


# -- after something happened: failures, exits, reviews ---------------------------------------


def broken_renderer(world, name: str) -> str:
    return renderer(world, name, checkpoint("ON_FAILURE"), template="{{ unclosed")


def test_on_failure_pauses_and_an_edit_gives_the_step_its_output(world):
    broken_renderer(world, "broken")
    run = world.run("broken", {})
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["subject"]) == ("ON_FAILURE", "failure")
    assert asked["payload"]["error"]["code"] == "TOOL_FAILURE"

    world.decide(run, "edit", payload={"text": "written by hand"})
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "written by hand"}


def test_on_failure_approve_tries_the_step_again(world):
    broken_renderer(world, "again")
    run = world.run("again", {})
    world.decide(run, "approve")
    world.advance_all()
    # The template is still broken: the second attempt fails and asks again.
    assert world.status(run) == "PAUSED"
    assert [a["status"] for a in world.approvals(run)] == ["APPROVED", "PENDING"]
    assert [s[1] for s in world.step_statuses(run)] == [1, 2]

    world.decide(run, "reject")
    world.advance_all()
    assert world.status(run) == "FAILED"
    assert world.error(run)[0] == "REJECTED"


def escalating_exit(world, name: str) -> str:
    think = step(1, "Think", "THOUGHT")
    think["exit_conditions"] = [{"condition": {"==": [1, 1]}, "next_step": "ESCALATE"}]
    after = step(2, "After", "THOUGHT")
    return world.add(name, planning={"static_plan": {"enabled": True, "steps": [think, after]}})


def test_an_escalate_exit_asks_and_approval_goes_on_past_it(world):
    escalating_exit(world, "exits")
    run = world.run("exits", {})
    assert world.status(run) == "PAUSED"
    assert world.approvals(run)[0]["trigger"] == "EXIT_ESCALATE"
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert [name for name, _, status in world.step_statuses(run) if status == "COMPLETED"] == [
        "Think",
        "After",
    ]


def test_a_review_that_escalates_takes_the_edited_output(world):
    world.add(
        "reviewed",
        io_contract=TEXT_OUT,
        logic_gate={
            "review_mechanism": {
                "enabled": True,
                "on_failure": "ESCALATE",
                "success_criteria": [
                    {"criterion": "says done", "validation_type": "REGEX", "validator": "^done$"}
                ],
            }
        },
    )
    run = world.run("reviewed", {})
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["subject"]) == ("REVIEW_ESCALATE", "output")
    world.decide(run, "edit", payload={"text": "done"})
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.output(run) == {"text": "done"}


def test_a_custom_condition_asks_before_the_step_it_holds_for(world):
    first, second = step(1, "First", "THOUGHT"), step(2, "Second", "THOUGHT")
    holds_later = {">=": [{"var": "iteration"}, 1]}
    world.add(
        "custom",
        planning={"static_plan": {"enabled": True, "steps": [first, second]}},
        governance=oversight(checkpoint("CUSTOM_CONDITION", condition=holds_later)),
    )
    run = world.run("custom", {})
    assert world.status(run) == "PAUSED"
    assert world.approvals(run)[0]["step"] == "First"
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "PAUSED"  # it holds before the second step too
    assert world.approvals(run)[-1]["step"] == "Second"
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


def test_after_planning_shows_the_plan_and_runs_the_edited_one(world):
    first, second = step(1, "First", "THOUGHT"), step(2, "Second", "THOUGHT")
    second["required"] = False
    world.add(
        "planned",
        planning={"static_plan": {"enabled": True, "steps": [first, second]}},
        governance=oversight(checkpoint("AFTER_PLANNING")),
    )
    run = world.run("planned", {})
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert asked["subject"] == "plan"
    assert [s["name"] for s in asked["payload"]] == ["First", "Second"]
    world.decide(run, "edit", payload=[asked["payload"][0]])
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert [name for name, _, _ in world.step_statuses(run)] == ["First"]


def test_the_packet_says_how_reversible_what_follows_is(world):
    execute = tool_definition(
        "launch",
        implementation="template_render",
        permissions="EXECUTE",
        function_schema={
            "name": "launch",
            "parameters": {
                "type": "object",
                "properties": {"template": {"type": "string"}},
                "required": ["template"],
            },
        },
    )
    each = step(1, "Launch", "TOOL_CALL", tool_id="launch")
    each["input_mapping"] = {"template": "go"}
    world.add(
        "launcher",
        tools=[execute],
        planning={"static_plan": {"enabled": True, "steps": [each]}},
        governance=oversight(checkpoint("BEFORE_TOOL_CALL")),
    )
    run = world.run("launcher", {})
    (asked,) = world.approvals(run)
    assert asked["reversibility"] == "none"
    assert asked["affected_steps"] == ["Launch"]
    assert asked["risk"] in ("high", "critical")
    assert "launch" in asked["summary"]


def test_a_cancelled_run_closes_its_request(world):
    renderer(world, "dropped", checkpoint("BEFORE_TOOL_CALL"))
    run = world.run("dropped", {})
    world.cancel(run)
    world.queue.append(run)
    world.advance_all()
    assert world.status(run) == "CANCELLED"
    assert world.approvals(run)[0]["status"] == "CANCELLED"
    assert world.call_counts(run) == (0, 0)
    # The tool step that waited on the person ends with the run, not WAITING forever.
    assert world.step_statuses(run) == [("Render", 1, "CANCELLED")]


def test_time_waiting_on_a_person_does_not_count_against_the_deadline(world):
    world.add(
        "patient",
        tools=[render_tool()],
        planning=render_from("hello"),
        io_contract=TEXT_OUT,
        governance={
            "human_oversight": {"hitl_checkpoints": [checkpoint("BEFORE_TOOL_CALL")]},
            "execution_limits": {"max_recursion_depth": 5, "timeout_ms": 60_000},
        },
    )
    run = world.run("patient", {})
    assert world.status(run) == "PAUSED"
    world.let_time_pass(3600)  # an hour in the inbox
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)


def test_a_rejection_re_plans_when_the_entity_takes_alternative_paths(world):
    each = step(1, "Render", "TOOL_CALL", tool_id="render")
    each["input_mapping"] = {"template": "hello", "variables": {}}
    world.add(
        "replanner",
        tools=[render_tool()],
        io_contract=TEXT_OUT,
        planning={
            "static_plan": {"enabled": True, "steps": [each]},
            "dynamic_planning": {"enabled": True, "planning_prompt": "Decide the steps."},
        },
        logic_gate={"review_mechanism": {"enabled": False, "on_failure": "ALTERNATIVE_PATH"}},
        governance=oversight(checkpoint("BEFORE_TOOL_CALL")),
    )
    run = world.run("replanner", {})
    assert world.status(run) == "PAUSED"
    world.decide(run, "reject", notes="use the other template")
    world.advance_all()

    # Not failed: planned again with the feedback, and a new pass asks again.
    assert world.status(run) == "PAUSED", world.error(run)
    replanned = world.events_of(run, "plan.replanned")
    assert replanned and "use the other template" in replanned[0]["reason"]
    assert [a["status"] for a in world.approvals(run)] == ["REJECTED", "PENDING"]
    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
