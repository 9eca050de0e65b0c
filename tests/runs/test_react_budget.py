"""A REACT agent's reasoning loop blocked on its budget between two turns, on the ORM store:
raising the budget resumes the step, which replays its recorded turn and tool call (nothing
paid or called twice, no key recorded twice) and goes on to its answer."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import F

from runs.models import LLMCall, Run, ToolCall
from runs.services import run_raise_budget
from tests.factories import EntityFactory, UserFactory, grant
from tests.support.queued_runs import Driver
from tests.support.react import QUESTION, REACT, stock_tool, weather_tool
from tests.support.worlds import io

pytestmark = pytest.mark.smoke


class _SpendsTheRest:
    """A tool runner whose call leaves the run's budget no room for another model call (as
    if what it cost took the rest)."""

    def __init__(self, runner: Any):
        self.runner, self.calls = runner, 0

    def invoke(self, invocation: Any) -> Any:
        self.calls += 1
        result = self.runner.invoke(invocation)
        Run.objects.filter(pk=invocation.run_id).update(budget_usd=F("total_cost_usd"))
        return result


def test_a_loop_blocked_on_its_budget_between_turns_replays_and_goes_on_when_raised(acme, db):
    driver = Driver()
    driver.engine.tools = tools = _SpendsTheRest(driver.engine.tools)
    entity = EntityFactory(
        workspace=acme,
        name="forecaster",
        type="AGENT",
        max_cost=1.0,
        tools=[weather_tool(), stock_tool()],
        logic_gate=REACT,
        io_contract=io({"city": "string", "question": "string"}, answer="string"),
    )
    run = driver.run(entity, QUESTION)
    assert (run.status, run.error_code) == ("BLOCKED", "BUDGET_EXHAUSTED")
    assert (run.llm_calls, run.tool_calls) == (1, 1)

    operator = grant(UserFactory(username="olga"), acme, "operator")
    driver.queue.extend(run_raise_budget(run=run, budget_usd="0.05", user=operator))
    driver.drain()
    run.refresh_from_db()
    assert run.status == "COMPLETED", run.error_message
    assert tools.calls == 1  # the tool was not called again
    assert LLMCall.objects.filter(run=run).count() == 2  # the first turn was not paid again
    assert ToolCall.objects.filter(run=run).count() == 1
    assert (run.llm_calls, run.tool_calls) == (2, 1)
