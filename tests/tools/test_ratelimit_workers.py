"""A tool's rate limit across two Celery worker processes: parallel children of one run call
a tool limited to LIMIT calls a minute; exactly LIMIT calls run in the minute, the others wait
as RATE_LIMITED for the next one (without spending a retry attempt) and then run.

Redis counts the calls when REDIS_URL is set (the scale setup), else the database.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from django.conf import settings

from runs.models import Run, RunEvent, StepRun
from runs.services import run_start
from tests.factories import EntityFactory, tool_definition
from tests.reliability.conftest import processes, workspace  # noqa: F401 - fixtures
from tests.reliability.processes import wait_for_the_end, wait_until
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability

LIMIT = 3
CHILDREN = 5
# The first LIMIT calls, and the refusals of the others, must fall into one calendar minute:
# they take a second or two, so a run starts no later than 10 s before the minute ends.
LATEST_START_SECOND = 50


def limited_tool(tool_id: str) -> dict:
    return tool_definition(
        tool_id,
        implementation="record",
        permissions="WRITE",
        rate_limit={"calls_per_minute": LIMIT},
        function_schema={
            "name": "save_row",
            "parameters": {
                "type": "object",
                "properties": {"table": {"type": "string"}, "data": {"type": "object"}},
                "required": ["table", "data"],
            },
        },
    )


def fan_out(in_workspace, tool: dict):
    """A SKILL with CHILDREN parallel ACTIONs, each recording one row with `tool`."""
    names = []
    for number in range(CHILDREN):
        name = f"saver_{number}"
        plan_step = {
            "step_id": "s1",
            "order": 1,
            "name": "Save",
            "type": "TOOL_CALL",
            "target": {"tool_id": tool["tool_id"]},
            "input_mapping": {"table": name, "data": {"var": "input"}},
        }
        EntityFactory(
            workspace=in_workspace,
            name=name,
            tools=[tool],
            planning={"static_plan": {"enabled": True, "steps": [plan_step]}},
        )
        names.append(name)
    return EntityFactory(
        workspace=in_workspace,
        name="fan_out",
        type="SKILL",
        children=[{"child_id": name, "relationship": "PARALLEL"} for name in names],
    )


def start_early_in_a_minute() -> int:
    """Wait, if need be, for a minute with time left in it; return the minute (epoch // 60)."""
    second = time.time() % 60
    if second > LATEST_START_SECOND:
        time.sleep(60 - second + 0.2)
    return int(time.time() // 60)


def test_exactly_the_limit_runs_in_a_minute_across_two_workers(processes, workspace):  # noqa: F811
    backend = "redis" if settings.REDIS_URL else "database"
    # Its own tool id: Redis counters outlive the test's database.
    tool = limited_tool(f"save_{uuid.uuid4().hex[:8]}")
    parent = fan_out(workspace, tool)
    environment = {"HIERARCH_RATE_LIMIT_BACKEND": backend, "REDIS_URL": settings.REDIS_URL or ""}
    processes.beat(**environment)  # wakes the runs that wait for the next minute
    processes.worker("one", **environment)
    processes.worker("two", **environment)

    minute = start_early_in_a_minute()
    run = run_start(entity=parent, input_data={"n": 1})

    # The first minute: LIMIT calls ran, every other child waits on the limit.
    def first_round_done() -> bool:
        waiting = StepRun.objects.filter(
            run__parent=run, error_code="RATE_LIMITED", status="WAITING"
        ).count()
        return RecordedRow.objects.count() + waiting >= CHILDREN

    wait_until(first_round_done, timeout=30, what="every child's first call", processes=processes)
    rows_in_first_minute = RecordedRow.objects.count()
    waiting = StepRun.objects.filter(run__parent=run, error_code="RATE_LIMITED", status="WAITING")
    waiting_messages = list(waiting.values_list("error_message", flat=True))
    assert int(time.time() // 60) == minute, "the first round crossed a minute boundary"
    assert rows_in_first_minute == LIMIT
    assert len(waiting_messages) == CHILDREN - LIMIT
    assert all(
        f"tool {tool['tool_id']}: calls_per_minute {LIMIT} reached; next call in" in message
        for message in waiting_messages
    ), waiting_messages

    # The next minute: the waiting children run, and the whole run completes.
    run = wait_for_the_end(run, processes, timeout=100)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    children = Run.objects.filter(parent=run)
    assert sorted(children.values_list("status", flat=True)) == ["COMPLETED"] * CHILDREN
    per_minute = Counter(
        int(created.timestamp() // 60)
        for created in RecordedRow.objects.values_list("created_at", flat=True)
    )
    assert per_minute == {minute: LIMIT, minute + 1: CHILDREN - LIMIT}, per_minute
    # Waiting for the limit spent no attempt of the retry policy.
    attempts = set(StepRun.objects.filter(run__parent=run).values_list("attempt", flat=True))
    assert attempts == {1}
    refusals = RunEvent.objects.filter(trace_id=run.trace_id, type="step.rate_limited").count()
    assert refusals == CHILDREN - LIMIT
    print(f"{backend}: {dict(per_minute)} rows per minute, limit {LIMIT}, two workers")
