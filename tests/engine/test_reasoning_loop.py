"""The reasoning loop of a REACT entity, on both stores: the model is offered the entity's
tools, calls the ones that fit (the offline model plays a tool-using agent), reads what
they returned and answers; every call passes the tool runner's checks and is recorded once;
each limit stops the loop with an error naming it; a refusal goes back to the model; and a
loop re-entered after a crash, a person's decision or a rate limit repeats no call."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runs.engine import react
from runs.engine.ports import RATE_LIMITED, Record, ToolCall, ToolError
from runs.engine.state import RunView
from tests.factories import tool_definition
from tests.support.react import QUESTION, REACT, stock_tool, weather_tool
from tests.support.worlds import MemoryWorld, StoreWrapper, World, io, limits

pytestmark = pytest.mark.smoke


@pytest.fixture
def world(each_store: World) -> World:
    return each_store


def agent(world: World, name: str = "forecaster", **sections: Any) -> str:
    return world.add(
        name,
        "AGENT",
        tools=sections.pop("tools", [weather_tool(), stock_tool()]),
        logic_gate=sections.pop("logic_gate", REACT),
        io_contract=io({"city": "string", "question": "string"}, answer="string"),
        **sections,
    )


def loop_events(world: World, run: str) -> list[str]:
    return [
        kind for kind in world.event_types(world.trace(run)) if kind in ("llm.call", "tool.call")
    ]


def test_a_react_agent_calls_the_tool_that_fits_then_answers_with_what_it_returned(world):
    agent(world)
    run = world.run("forecaster", QUESTION)

    assert world.status(run) == "COMPLETED", world.error(run)
    (call,) = world.tool_calls(run)
    assert call.tool_id == "weather_lookup"  # the stock tool shares no word with the task
    assert call.arguments == {"city": "Paris"}  # taken from the input
    assert call.success
    assert call.key.startswith(f"{run}:") and call.key.endswith(":1:1:0")
    # A model call, the tool call it asked for, then the answer.
    assert loop_events(world, run) == ["llm.call", "tool.call", "llm.call"]
    assert world.call_counts(run) == (2, 1)
    first, second = world.call_log(run)
    assert (first.purpose, second.purpose) == ("THOUGHT", "THOUGHT")
    assert "[tool]" not in first.prompt and "[tool]" in second.prompt
    assert "forecast" in second.prompt  # the model read the tool's result
    answer = world.output(run)["answer"]
    assert answer.startswith("The tools returned:") and "forecast" in answer


def test_a_thought_step_of_another_reasoning_mode_is_offered_no_tools(world):
    agent(world, "plain", logic_gate={"reasoning_config": {"reasoning_mode": "CHAIN_OF_THOUGHT"}})
    run = world.run("plain", QUESTION)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.call_counts(run) == (1, 0)
    assert world.tool_calls(run) == []


def test_a_react_agent_may_call_several_tools_in_one_turn(world):
    agent(world, "broker")
    run = world.run("broker", {"city": "Paris", "question": "the weather, and the share price"})
    assert world.status(run) == "COMPLETED", world.error(run)
    assert [c.tool_id for c in world.tool_calls(run)] == ["weather_lookup", "stock_price"]
    assert [c.key[-2:] for c in world.tool_calls(run)] == [":0", ":1"]
    assert world.call_counts(run) == (2, 2)


# -- limits ------------------------------------------------------------------------------------


def test_max_tool_calls_stops_the_loop_with_its_error(world):
    agent(world, "thrifty", governance=limits(max_tool_calls=1))
    run = world.run("thrifty", {"city": "Paris", "question": "the weather, and the share price"})
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "max_tool_calls 1" in message
    assert [c.tool_id for c in world.tool_calls(run)] == ["weather_lookup"]


def test_max_llm_calls_stops_the_loop_with_its_error(world):
    agent(world, "terse", governance=limits(max_llm_calls=1))
    run = world.run("terse", QUESTION)
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "max_llm_calls 1" in message
    assert world.call_counts(run) == (1, 1)  # the tool was called; no turn after it


def test_the_turn_cap_stops_a_loop_that_does_not_answer(world):
    world.max_tool_turns = 1
    agent(world, "capped")
    run = world.run("capped", QUESTION)
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "LIMIT_EXCEEDED"
    assert "HIERARCH_MAX_TOOL_TURNS 1" in message
    assert world.call_counts(run) == (1, 1)


class _Later:
    """The machine's clock, `seconds` ahead."""

    def __init__(self, seconds: float):
        self.ahead = timedelta(seconds=seconds)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.ahead


def test_the_run_time_limit_stops_the_loop_between_turns(world):
    class _SlowTool(StoreWrapper):
        """The tool call takes longer than the run may."""

        def record(self, run: RunView, record: Record) -> RunView:
            if isinstance(record, ToolCall):
                if isinstance(self._world, MemoryWorld):
                    self._world.let_time_pass(120)
                else:  # the engine reads the time from its clock, the deadline from the run
                    self._world.engine_in_use.clock = _Later(120)
            return self._store.record(run, record)

    agent(world, "hasty", governance=limits(timeout_ms=60_000))
    run = world.start("hasty", QUESTION)
    world.wrap_next = _SlowTool
    world.advance_all()
    assert world.status(run) == "FAILED"
    code, message = world.error(run)
    assert code == "TIMEOUT"
    assert "timeout_ms 60000" in message and "reasoning loop" in message
    assert world.call_counts(run) == (1, 1)


# -- refusals ----------------------------------------------------------------------------------


def test_a_tool_the_safety_rails_forbid_is_refused_and_the_model_hears_why(world):
    rails = {
        "action_restrictions": [{"restricted_action": "weather_lookup", "blocked_entirely": True}]
    }
    agent(world, "fenced", governance={**limits(), "safety_rails": rails})
    run = world.run("fenced", QUESTION)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.tool_calls(run) == []  # never called
    first, second = world.call_log(run)
    assert "PERMISSION_DENIED" in second.prompt and "action_restrictions" in second.prompt
    assert "PERMISSION_DENIED" in world.output(run)["answer"]


def test_a_tool_the_runner_refuses_is_recorded_failed_and_the_model_hears_why(world):
    broken = weather_tool()
    broken["output_schema"] = {"not": {}}  # nothing is valid: the simulated tool fails
    agent(world, "unlucky", tools=[broken])
    run = world.run("unlucky", QUESTION)
    assert world.status(run) == "COMPLETED", world.error(run)
    (call,) = world.tool_calls(run)
    assert not call.success and "output_schema" in call.error
    assert "output_schema" in world.call_log(run)[1].prompt


def _asks_before_tools(world: World, name: str) -> str:
    oversight = {"hitl_checkpoints": [{"trigger": "BEFORE_TOOL_CALL"}]}
    return agent(world, name, governance={**limits(), "human_oversight": oversight})


def test_a_person_approves_a_tool_call_inside_the_loop_and_nothing_is_paid_twice(world):
    _asks_before_tools(world, "careful")
    run = world.run("careful", QUESTION)
    assert world.status(run) == "PAUSED"
    (asked,) = world.approvals(run)
    assert asked["subject"] == "tool_arguments" and asked["payload"] == {"city": "Paris"}
    assert world.call_counts(run) == (1, 0)

    world.decide(run, "approve")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.model_call_count(run) == 2  # the first turn was replayed, not paid again
    assert world.call_counts(run) == (2, 1)
    assert [c.tool_id for c in world.tool_calls(run)] == ["weather_lookup"]


def test_a_person_who_rejects_a_call_inside_the_loop_is_heard_by_the_model(world):
    _asks_before_tools(world, "vetoed")
    run = world.run("vetoed", QUESTION)
    world.decide(run, "reject", notes="not that city")
    world.advance_all()
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.tool_calls(run) == []
    assert world.model_call_count(run) == 2
    last = world.call_log(run)[-1].prompt
    assert "REJECTED" in last and "not that city" in last


# -- durability ---------------------------------------------------------------------------------


class WorkerDied(BaseException):
    """The worker process was killed: not an Exception, so the engine cannot record it."""


class _DiesAfterTheTool(StoreWrapper):
    """The worker is killed the moment its tool call is recorded, before the next turn: its
    lease is left behind (a killed process lets nothing go)."""

    died = False

    def record(self, run: RunView, record: Record) -> RunView:
        written = self._store.record(run, record)
        if isinstance(record, ToolCall):
            self.died = True
            raise WorkerDied(run.id)
        return written

    def release(self, run: RunView) -> None:
        if not self.died:
            self._store.release(run)


class _CountingTools:
    def __init__(self, runner: Any):
        self.runner, self.calls = runner, 0

    def invoke(self, invocation: Any) -> Any:
        self.calls += 1
        return self.runner.invoke(invocation)


def test_a_worker_that_dies_between_a_tool_and_the_next_turn_repeats_nothing(world):
    world.tools = counting = _CountingTools(world.tools)
    agent(world, "sturdy")
    run = world.start("sturdy", QUESTION)
    world.wrap_next = _DiesAfterTheTool
    with pytest.raises(WorkerDied):
        world.advance_all()
    assert world.status(run) == "RUNNING"
    assert world.call_counts(run) == (1, 1)

    world.advance(run)  # another worker: the dead one's lease has not expired yet
    assert world.status(run) == "RUNNING"
    world.let_time_pass(world.lease_seconds + 1)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert counting.calls == 1  # the tool was not called again
    assert world.model_call_count(run) == 2  # the first turn's call was reused
    assert world.call_counts(run) == (2, 1)
    assert loop_events(world, run).count("tool.call") == 1
    assert loop_events(world, run).count("llm.call") == 2


class _RateLimitedOnce:
    """A tool runner whose first call meets a full rate limit (as tools/ratelimit.py answers)."""

    def __init__(self, runner: Any):
        self.runner, self.refused, self.calls = runner, 0, 0

    def invoke(self, invocation: Any) -> Any:
        self.calls += 1
        if not self.refused:
            self.refused += 1
            raise ToolError(
                "tool weather_lookup: calls_per_minute 1 reached; next call in 2.5 s",
                code=RATE_LIMITED,
                retry_after_s=2.5,
            )
        return self.runner.invoke(invocation)


def test_a_rate_limited_tool_inside_the_loop_waits_its_turn_and_goes_on(world):
    world.tools = limited = _RateLimitedOnce(world.tools)
    agent(world, "patient")
    run = world.run("patient", QUESTION)
    assert world.status(run) == "RUNNING"
    assert world.later == [(run, 2.5)]
    assert world.step_statuses(run) == [("Answer", 1, "WAITING")]

    world.let_time_pass(3)
    world.advance(run)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.step_statuses(run) == [("Answer", 1, "COMPLETED")]  # the same attempt
    assert world.model_call_count(run) == 2  # the first turn replayed, not paid again
    assert limited.calls == 2  # refused once, then made
    (call,) = world.tool_calls(run)
    assert call.success


def test_the_bias_judge_after_a_loop_is_a_call_of_its_own(world):
    agent(world, "judged", governance={**limits(), "safety_rails": {"content_filters": ["BIAS"]}})
    run = world.run("judged", QUESTION)
    assert world.status(run) == "COMPLETED", world.error(run)
    assert world.call_counts(run) == (3, 1)  # two turns, then the judge (no key reused)


def test_the_model_sees_each_tool_under_a_valid_and_unique_function_name():
    odd = tool_definition("look.up", function_schema={"name": "look up: the weather!"})
    twin = tool_definition("look_up2", function_schema={"name": "look up: the weather?"})
    bare = tool_definition("x" * 80, function_schema={})
    names = list(react.offered({"capabilities": {"tools": [odd, twin, bare]}}))
    assert names == ["look_up_the_weather", "look_up_the_weather_2", "x" * 64]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)
