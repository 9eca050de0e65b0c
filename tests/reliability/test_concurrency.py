"""Several worker processes on one hierarchy: parallel children run at the same time and the
parent joins them once; cancelling a run stops the whole tree."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import LLMCall, Run, RunEvent, StepRun
from runs.services import run_cancel, run_start
from tests.reliability.hierarchies import action, parent, record, thought
from tests.reliability.processes import wait_for_the_end, wait_until
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability

SLOW_MS = "2000"


def overlap(a: tuple, b: tuple) -> timedelta:
    """How long two (start, end) ranges share; negative when they do not meet."""
    return min(a[1], b[1]) - max(a[0], b[0])


def fan_out_on_two_workers(processes, workspace) -> tuple[Run, list[Run]]:
    """A parent with two PARALLEL children (a slow model step, then a recorded row each),
    run to its end on two single-slot workers."""
    action(workspace, "left", thought(1, "Think"), record(2, "left"))
    action(workspace, "right", thought(1, "Think"), record(2, "right"))
    fan_out = parent(workspace, "fan_out", "left", "right", relationship="PARALLEL")
    # No sweeper: the last child to finish must wake the parent, not a sweep.
    processes.worker("one", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    processes.worker("two", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)

    run = run_start(entity=fan_out, input_data={"n": 1})
    run = wait_for_the_end(run, processes, timeout=45)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    children = list(Run.objects.filter(parent=run).order_by("group_index"))
    assert [child.status for child in children] == ["COMPLETED", "COMPLETED"]
    return run, children


def test_parallel_children_run_on_two_workers_at_once_and_join_once(processes, workspace):
    run, children = fan_out_on_two_workers(processes, workspace)

    # Concurrent: the children's model calls, each SLOW_MS long, ran at the same time. A call
    # is recorded the moment it returns, with its latency.
    calls = [LLMCall.objects.get(run=child) for child in children]
    ranges = [(c.timestamp - timedelta(milliseconds=c.latency_ms), c.timestamp) for c in calls]
    shared = overlap(*ranges)
    assert shared > timedelta(milliseconds=1000), shared

    # They finished at about the same moment; the parent joined each exactly once.
    apart = abs(children[0].completed_at - children[1].completed_at)
    child_steps = {child.parent_step_key.rsplit("#", 1)[0] for child in children}
    joins = StepRun.objects.filter(run=run, status="COMPLETED")
    assert Counter(joins.values_list("step_key", flat=True)) == Counter(
        dict.fromkeys(child_steps, 1)
    )
    assert not StepRun.objects.filter(run=run).exclude(status="COMPLETED").exists()
    endings = RunEvent.objects.filter(run=run, type="run.status", payload__status="COMPLETED")
    assert endings.count() == 1
    assert sorted(RecordedRow.objects.values_list("table", flat=True)) == ["left", "right"]
    print(
        f"model calls overlapped {shared.total_seconds():.2f} s; children finished "
        f"{apart.total_seconds() * 1000:.0f} ms apart"
    )


def test_parallel_children_have_overlapping_step_and_run_times(processes, workspace):
    run, children = fan_out_on_two_workers(processes, workspace)

    steps = [StepRun.objects.get(run=child, type="THOUGHT") for child in children]
    assert all(s.finished_at - s.started_at >= timedelta(milliseconds=1500) for s in steps)
    assert overlap(*[(s.started_at, s.finished_at) for s in steps]) > timedelta(seconds=1)
    assert overlap(*[(c.started_at, c.completed_at) for c in children]) > timedelta(seconds=1)


def test_a_cancelled_run_leaves_no_step_running_and_no_child_pending(processes, workspace):
    action(workspace, "slow", thought(1, "First"), thought(2, "Second"), thought(3, "Third"))
    action(workspace, "after", record(1, "after"))
    pipeline = parent(workspace, "pipeline", "slow", "after", relationship="SEQUENTIAL")
    processes.beat()
    processes.worker("one", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    processes.worker("two", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)

    run = run_start(entity=pipeline, input_data={"n": 1})
    slow = wait_until(
        lambda: Run.objects.filter(parent=run, lease_expires_at__gt=timezone.now()).first(),
        timeout=30,
        what="the first child to run",
        processes=processes,
    )
    time.sleep(0.5)  # inside the child's first model call
    cancelled_at = timezone.now()
    assert run_cancel(run=Run.objects.get(pk=run.pk)) == 2
    run = wait_for_the_end(run, processes, timeout=30)

    problems = []
    statuses = dict(Run.objects.filter(trace_id=run.trace_id).values_list("entity__name", "status"))
    if statuses != {"pipeline": "CANCELLED", "slow": "CANCELLED"}:
        problems.append(f"the runs ended {statuses}; the next child must never start")
    late = LLMCall.objects.filter(run=slow, timestamp__gt=cancelled_at).count()
    if late > 1:
        problems.append(f"{late} model calls ended after the cancel; only the step in flight may")
    unfinished = StepRun.objects.filter(
        run__trace_id=run.trace_id, status__in=["RUNNING", "WAITING"]
    ).values_list("run__entity__name", "name", "status")
    if unfinished:
        problems.append(f"steps left unfinished: {list(unfinished)}")
    if RecordedRow.objects.exists():
        problems.append("the child after the cancelled one recorded its row")
    assert not problems, problems
