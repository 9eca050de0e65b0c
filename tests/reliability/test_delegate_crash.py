"""A Celery worker killed while a reasoning loop's hires are under way
(runs/engine/delegating.py): another worker finishes the tree, and nobody is hired twice.
The hirer is a REACT agent whose offline model hires one subordinate per part of its task
with the `delegate` tool, waits for them, then answers with their work (two turns). Killed
right after the hires' commit, or with the hirer's second turn in flight, the tree ends with
the same two subordinates, each model call recorded once, the hirer's budget set aside for
them given back, and their work in its answer.

The worker is stopped where the database shows it is, as in test_hire_crash.py: the offline
model answers slowly, and a call counts when it goes out but is recorded when it returns."""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.models import LLMCall, Run
from runs.services import run_start
from tests.factories import EntityFactory
from tests.reliability.processes import wait_for_the_end, wait_until

pytestmark = pytest.mark.reliability

SLOW_MS = "1500"
PARTS = ["Write the headline", "Write the body copy"]


def coordinating_tree(workspace) -> Run:
    EntityFactory(
        workspace=workspace,
        name="writer",
        type="SKILL",
        io_contract={
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {"task": {"type": "string"}},
                    "required": ["task"],
                }
            },
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                }
            },
        },
    )
    coordinator = EntityFactory(
        workspace=workspace,
        name="coordinator",
        type="AGENT",
        max_cost=1.0,
        logic_gate={"reasoning_config": {"reasoning_mode": "REACT"}},
        capabilities={
            "delegation": {"enabled": True, "templates": ["writer"], "max_budget_usd_each": 0.2}
        },
        io_contract={
            "input": {
                "schema": {
                    "type": "object",
                    "properties": {"parts": {"type": "array", "items": {"type": "string"}}},
                    "required": ["parts"],
                }
            },
            "output": {
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"type": "string"}},
                    "required": ["answer"],
                }
            },
        },
    )
    return run_start(entity=coordinator, input_data={"parts": PARTS})


def subordinates(root: Run) -> list[Run]:
    return list(Run.objects.filter(parent=root).order_by("group_index"))


def recorded(root: Run) -> int:
    return LLMCall.objects.filter(run__trace_id=root.trace_id).count()


def hired(root: Run) -> bool:
    """The hires' commit is in: both subordinates' rows exist."""
    return len(subordinates(root)) == 2


def second_turn_in_flight(root: Run) -> bool:
    """Both subordinates ended; the hirer's second turn (it read their work) is in flight."""
    found = subordinates(root)
    return (
        len(found) == 2
        and all(run.status == "COMPLETED" for run in found)
        and Run.objects.get(pk=root.pk).llm_calls > recorded(root)
        and LLMCall.objects.filter(run=root).count() == 1
    )


@pytest.mark.parametrize(
    "moment", [hired, second_turn_in_flight], ids=["after-the-hires", "mid-turn"]
)
def test_a_worker_killed_while_a_loop_hires_hires_nobody_twice(processes, workspace, moment):
    processes.beat()
    first = processes.worker("first", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    root = coordinating_tree(workspace)

    wait_until(lambda: moment(root), timeout=60, what=moment.__name__, processes=processes)
    processes.kill(first)
    hired_at_kill = [run.pk for run in subordinates(root)]
    if moment is hired:
        assert Run.objects.get(pk=root.pk).status == "WAITING"

    processes.worker("second", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    root = wait_for_the_end(root, processes, timeout=90)

    assert root.status == "COMPLETED", (root.error_code, root.error_message)
    found = subordinates(root)
    assert [run.pk for run in found] == hired_at_kill  # nobody hired twice
    assert Run.objects.filter(trace_id=root.trace_id).count() == 3
    assert [(run.role, run.task.split(" (for")[0], run.status) for run in found] == [
        ("Writer", PARTS[0], "COMPLETED"),
        ("Writer", PARTS[1], "COMPLETED"),
    ]
    calls = LLMCall.objects.filter(run__trace_id=root.trace_id)
    assert calls.filter(run=root).count() == 2  # two turns, each recorded once
    assert all(calls.filter(run=run).count() == 1 for run in found)
    assert len(set(calls.values_list("call_key", flat=True))) == 4
    # Their budgets ($0.20 each) were set aside at the hirer and given back with their ends;
    # what stays set aside is at most the estimate of a call the killed worker had in flight.
    assert root.reserved_usd < Decimal("0.2")
    assert all(run.budget_usd == Decimal("0.2") for run in found)
    answer = root.output_data["answer"]
    for run in found:  # their work, as the model quotes it (each result's start)
        assert run.output_data["text"][:40] in answer
