"""The reasoning loop's built-in delegate tool (runs/engine/delegating.py), on both stores: a
REACT agent that may hire is offered `delegate`; the offline model hires one subordinate per
distinct part of its task, of the template that fits the part; the hirer waits WAITING
without a worker, reads each subordinate's work as the call's result and answers with it;
every model call is made once; refusals (a limit, a person, no budget) and a fired
subordinate are heard by the model, which goes on."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from runs.engine import delegating, react
from runs.engine.ports import ModelCall, Record
from runs.engine.state import RunView
from tests.support.runs import io
from tests.support.worlds import StoreWrapper, World

REACT = {"reasoning_config": {"reasoning_mode": "REACT"}}
BRIEF = {
    "brief": "Announce the 1.0 release of Hierarch.",
    "parts": ["Write the headline", "Write the body copy of the announcement"],
}


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def writers(world: World) -> None:
    """Two templates: a headline writer and a copywriter, each answering its task."""
    for name, description in (
        ("headline_writer", "Writes one punchy headline"),
        ("copywriter", "Writes body copy: the paragraphs of an announcement"),
    ):
        world.add(
            name,
            "SKILL",
            identity={"description": description},
            io_contract=io({"task": "string"}, text="string"),
        )


def coordinator(
    world: World,
    name: str = "coordinator",
    *,
    delegation: dict | None = None,
    max_cost: float | None = 1.0,
    **sections: Any,
) -> str:
    rules = {
        "enabled": True,
        "templates": ["headline_writer", "copywriter"],
        "max_budget_usd_each": 0.2,
        **(delegation or {}),
    }
    return world.add(
        name,
        "AGENT",
        max_cost=max_cost,
        logic_gate=REACT,
        capabilities={"delegation": rules},
        io_contract={
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "brief": {"type": "string"},
                        "parts": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["brief"],
                }
            },
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"announcement": {"type": "string"}},
                    "required": ["announcement"],
                }
            },
        },
        **sections,
    )


def last_prompt(world: World, run: str) -> str:
    return world.call_log(run)[-1].prompt


def test_a_coordinator_hires_one_specialist_per_part_and_answers_with_their_work(world):
    writers(world)
    coordinator(world)
    run = world.start("coordinator", BRIEF)
    world.advance(world.queue.pop(0))  # the first turn hires, and the hirer waits

    assert world.status(run) == "WAITING", world.error(run)
    assert world.step_statuses(run) == [("Answer", 1, "WAITING")]
    headline, body = world.children(run)
    assert world.entity_name(headline) == "headline_writer"  # the template that fits the part
    assert world.entity_name(body) == "copywriter"
    record = world.hire_record(headline)
    assert record["role"] == "Headline writer"
    assert record["task"] == "Write the headline (for: Announce the 1.0 release of Hierarch.)"
    assert record["hired_reason"].startswith("part 1 of 2 of the task")
    assert record["hired_by"] == run
    assert world.input(body) == {
        "task": "Write the body copy of the announcement (for: Announce the 1.0 release of "
        "Hierarch.)"
    }
    # Each hire's budget (max_budget_usd_each) is set aside at the hirer's while it works.
    assert world.budget(headline)[0] == Decimal("0.2")
    assert world.budget(run)[1] == Decimal("0.4")

    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [("Answer", 1, "COMPLETED")]
    assert world.budget(run)[1] == 0  # what they did not spend came back
    own = sum((cost for _, cost in world.model_calls(run)), Decimal(0))
    spent = [world.budget(r)[2] for r in (run, headline, body)]
    assert spent[0] == own + spent[1] + spent[2]  # the hirer pays what they spent, no more
    # Two turns, each paid once: the first was replayed after the wait, not called again.
    assert world.model_call_count(run) == 2
    answer = world.output(run)["announcement"]
    assert answer.startswith("The tools returned:")
    for child in (headline, body):
        assert json.dumps(world.output(child), ensure_ascii=False, sort_keys=True) in answer
    assert "[tool]" in last_prompt(world, run)  # the model read their work
    hired = [e for e in world.events(world.trace(run)) if e[2] == "run.hired"]
    assert [e[3]["role"] for e in hired] == ["Headline writer", "Copywriter"]


def test_the_parts_of_a_task_in_one_text_are_its_sentences(world):
    writers(world)
    coordinator(world)
    brief = {"brief": "Write a headline for the launch. Then write the announcement's body copy."}
    run = world.run("coordinator", brief)

    assert world.status(run) == "COMPLETED", world.error(run)
    tasks = [world.hire_record(child)["task"] for child in world.children(run)]
    assert tasks == [
        f"Write a headline for the launch. (for: {brief['brief']})",
        f"Then write the announcement's body copy. (for: {brief['brief']})",
    ]


def test_hires_past_max_subordinates_are_refused_and_the_model_hears_why(world):
    writers(world)
    coordinator(world, delegation={"max_subordinates": 1})
    run = world.run("coordinator", BRIEF)

    assert world.status(run) == "COMPLETED", world.error(run)
    (child,) = world.children(run)
    assert world.entity_name(child) == "headline_writer"
    assert "1 more would pass its max_subordinates 1" in last_prompt(world, run)
    assert world.model_call_count(run) == 2


def test_a_hire_the_budget_has_no_room_for_is_heard_and_nothing_is_set_aside(world):
    writers(world)
    coordinator(world, max_cost=0.3)  # two hires of $0.20 each do not fit in $0.30
    run = world.run("coordinator", BRIEF)

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.children(run) == []  # all or none
    assert "no hire was made" in last_prompt(world, run)
    assert world.budget(run)[1] == 0


def test_a_hire_deeper_than_max_recursion_depth_is_refused(world):
    writers(world)
    coordinator(world, governance={"execution_limits": {"max_recursion_depth": 0}})
    run = world.run("coordinator", BRIEF)

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.children(run) == []
    assert "more than max_recursion_depth 0" in last_prompt(world, run)


def test_a_fired_subordinate_is_heard_by_its_hirer_which_goes_on(world):
    writers(world)
    coordinator(world)
    run = world.start("coordinator", BRIEF)
    world.advance(world.queue.pop(0))
    headline, body = world.children(run)
    world.queue.clear()

    world.fire(headline, "the headline is off brand")
    world.queue.append(headline)
    world.queue.append(body)
    world.advance_all()

    assert world.status(headline) == "CANCELLED"
    assert world.status(body) == "COMPLETED"
    assert world.status(run) == "COMPLETED", world.error(run)
    heard = last_prompt(world, run)
    assert "FIRED" in heard and "the headline is off brand" in heard
    assert world.budget(run)[1] == 0


def _spawn_checked(world: World) -> str:
    writers(world)
    oversight = {"hitl_checkpoints": [{"trigger": "SUBAGENT_SPAWN"}]}
    return coordinator(
        world, governance={"cost_controls": {"max_cost_usd": 1.0}, "human_oversight": oversight}
    )


def test_a_subagent_spawn_checkpoint_asks_a_person_before_the_turns_hires(world):
    _spawn_checked(world)
    run = world.run("coordinator", BRIEF)

    assert world.status(run) == "PAUSED"
    assert world.children(run) == []
    (asked,) = world.approvals(run)
    assert (asked["trigger"], asked["subject"]) == ("SUBAGENT_SPAWN", "hire")
    assert [hire["role"] for hire in asked["payload"]] == ["Headline writer", "Copywriter"]

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert len(world.children(run)) == 2
    assert world.model_call_count(run) == 2  # the first turn replayed after the decision


def test_a_person_who_rejects_the_hires_is_heard_by_the_model(world):
    _spawn_checked(world)
    run = world.run("coordinator", BRIEF)
    world.decide(run, "reject", notes="write it yourself")
    world.advance_all()

    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.children(run) == []
    heard = last_prompt(world, run)
    assert "REJECTED" in heard and "write it yourself" in heard


class WorkerDied(BaseException):
    """The worker process was killed: not an Exception, so the engine cannot record it."""


class _DiesAfterTheAnswer(StoreWrapper):
    """The worker is killed the moment the hirer's last model call is recorded (after it
    read its subordinates' work), before the step's end is written."""

    died = False
    hirer = ""

    def record(self, run: RunView, record: Record) -> RunView:
        written = self._store.record(run, record)
        if isinstance(record, ModelCall) and run.id == self.hirer and record.key.endswith(":1"):
            type(self).died = True
            raise WorkerDied(run.id)
        return written

    def release(self, run: RunView) -> None:
        if not type(self).died:
            self._store.release(run)


def test_a_worker_that_dies_after_reading_the_work_hires_no_one_twice(world):
    writers(world)
    coordinator(world)
    run = world.start("coordinator", BRIEF)
    world.advance(world.queue.pop(0))
    for child in world.children(run):
        world.advance(child)
    world.queue.clear()
    _DiesAfterTheAnswer.hirer = run
    world.wrap_next = _DiesAfterTheAnswer
    with pytest.raises(WorkerDied):
        world.advance(run)
    assert world.model_call_count(run) == 2

    world.let_time_pass(world.lease_seconds + 1)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert len(world.children(run)) == 2  # nobody was hired twice
    assert world.model_call_count(run) == 2  # no turn was paid twice
    assert world.budget(run)[1] == 0


def test_the_delegate_tool_is_offered_under_its_own_name_with_the_templates():
    definition: dict[str, Any] = {
        "identity": {"name": "lead"},
        "logic_gate": {"reasoning_config": {"reasoning_mode": "REACT"}},
        "capabilities": {
            "tools": [{"tool_id": "delegate", "function_schema": {"name": "delegate"}}],
            "delegation": {"enabled": True, "templates": ["w"], "max_budget_usd_each": 0.5},
        },
    }
    assert list(react.offered(definition)) == ["delegate_2"]  # the built-in keeps its name
    found = {"w": {"identity": {"name": "writer", "description": "Writes"}}}
    function = delegating.function(definition, found)  # type: ignore[arg-type]
    assert function["name"] == "delegate"
    assert "writer: Writes" in function["description"]
    properties = function["parameters"]["properties"]
    assert properties["template"]["enum"] == ["writer"]
    assert properties["budget_usd"]["maximum"] == 0.5


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("not an object", "takes an object"),
        ({"template": "w", "role": "r", "task": "t", "budget_usd": "lots"}, "is not a number"),
        ({"template": "w", "role": "r", "task": "t", "budget_usd": -1}, "must be more than 0"),
        ({"template": "w", "role": "r", "task": "t", "budget_usd": 1e400}, "not a finite amount"),
    ],
)
def test_a_delegate_call_that_is_no_hire_says_why(arguments, problem):
    assert problem in delegating.request_of(arguments)


def test_a_hirer_past_its_time_limit_while_it_waits_fires_its_hires(world):
    writers(world)
    coordinator(world, governance={"execution_limits": {"timeout_ms": 60_000}})
    run = world.start("coordinator", BRIEF)
    world.advance(world.queue.pop(0))  # hires, and waits
    headline, body = world.children(run)
    world.queue.clear()

    world.let_time_pass(120)
    world.advance(run)  # the hirer finds its deadline passed
    world.advance_all()

    assert world.error(run)[0] == "TIMEOUT"
    assert world.step_statuses(run) == [("Answer", 1, "FAILED")]
    for hired in (headline, body):
        assert world.status(hired) == "CANCELLED"
        assert world.hire_record(hired)["fired_by"] == "limit"
    assert world.budget(run)[1] == 0  # their budgets came back
