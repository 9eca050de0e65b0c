"""A Celery worker killed in the middle of a reasoning loop: the run resumes on another worker
at the turn it was in, the tool call that had returned is not made again (its side effect
happens once), and the model call that had returned is not paid again."""

from __future__ import annotations

import time

import pytest

from runs.models import LLMCall, Run, ToolCall
from runs.services import run_start
from tests.factories import EntityFactory
from tests.reliability.hierarchies import record_tool
from tests.reliability.processes import wait_for_the_end, wait_until
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability

SLOW_MS = "1500"  # each model call: the loop's second turn is in flight this long


def saving_agent(workspace):
    """A REACT agent whose one tool saves a row: the offline model calls it in the first
    turn (the task names it), reads its result, then answers in a second turn."""
    return EntityFactory(
        workspace=workspace,
        name="saver_agent",
        type="AGENT",
        tools=[record_tool("saved")],
        logic_gate={"reasoning_config": {"reasoning_mode": "REACT"}},
        planning={
            "static_plan": {
                "enabled": True,
                "steps": [
                    {
                        "step_id": "s1",
                        "order": 1,
                        "name": "Save",
                        "type": "THOUGHT",
                        "target": {"prompt_template": "Save the row with save_row, then answer."},
                    }
                ],
            }
        },
    )


def test_a_worker_killed_between_a_tool_and_the_next_turn_repeats_nothing(processes, workspace):
    entity = saving_agent(workspace)
    processes.beat()
    first = processes.worker("first", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    run = run_start(entity=entity, input_data={})
    run_id = str(run.pk)

    wait_until(
        lambda: RecordedRow.objects.filter(run_id=run_id).exists(),
        timeout=30,
        what="the tool's saved row",
        processes=processes,
    )
    time.sleep(0.3)  # inside the second turn's (slow) model call
    processes.kill(first)
    assert Run.objects.get(pk=run_id).status == "RUNNING"
    assert LLMCall.objects.filter(run_id=run_id).count() == 1
    assert ToolCall.objects.filter(run_id=run_id).count() == 1

    processes.worker("second", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    run = wait_for_the_end(run, processes, timeout=60)

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert RecordedRow.objects.filter(run_id=run_id).count() == 1
    calls = list(ToolCall.objects.filter(run=run))
    assert len(calls) == 1 and calls[0].success
    model_calls = LLMCall.objects.filter(run=run)
    assert model_calls.count() == 2  # the first turn's call reused, the second made once
    assert len(set(model_calls.values_list("call_key", flat=True))) == 2
    run.refresh_from_db()
    assert (run.llm_calls, run.tool_calls) == (2, 1)
