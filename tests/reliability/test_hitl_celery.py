"""Human in the loop with real processes: a Celery worker pauses a run on a person without
holding its slot, the decision hands the run back, and a timeout fires on time from the
worker's main process while its only pool process is busy with a slow step."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval
from approvals.services import approval_decide
from runs.models import RunEvent, ToolCall
from runs.services import run_start
from tests.factories import EntityFactory, UserFactory, grant
from tests.reliability.hierarchies import action, record, record_tool, thought
from tests.reliability.processes import wait_for_the_end, wait_until

pytestmark = pytest.mark.reliability


def guarded(workspace, name: str, **checkpoint) -> object:
    return EntityFactory(
        workspace=workspace,
        name=name,
        tools=[record_tool()],
        planning={"static_plan": {"enabled": True, "steps": [record(1, name)]}},
        governance={
            "human_oversight": {
                "hitl_checkpoints": [{"trigger": "BEFORE_TOOL_CALL", **checkpoint}]
            },
            "execution_limits": {"max_recursion_depth": 5},
        },
    )


def test_a_paused_run_frees_the_worker_and_goes_on_when_approved(processes, workspace):
    approver = grant(UserFactory(username="dana"), workspace, "approver")
    entity = guarded(workspace, "ledger_entry")
    processes.worker("only")
    run = run_start(entity=entity, input_data={"amount": 12})

    request = wait_until(
        lambda: Approval.objects.filter(run=run, status="PENDING").first(),
        timeout=30,
        what="the request",
        processes=processes,
    )
    processes.wait_idle()  # the worker holds no task while the run waits on a person
    run.refresh_from_db()
    assert run.status == "PAUSED" and not run.lease_owner
    assert not ToolCall.objects.filter(run=run).exists()

    # A second run goes through the same single-slot worker meanwhile.
    other = run_start(entity=action(workspace, "quick", thought(1, "Answer")), input_data={})
    assert wait_for_the_end(other, processes, timeout=30).status == "COMPLETED"

    approval_decide(approval=request, user=approver, decision="approve")
    run = wait_for_the_end(run, processes, timeout=30)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert ToolCall.objects.filter(run=run, success=True).count() == 1
    decided = RunEvent.objects.get(run=run, type="approval.decided")
    tool_started = (
        RunEvent.objects.filter(run=run, type="tool.call", seq__gt=decided.seq)
        .order_by("seq")
        .first()
    )
    assert tool_started is not None


def test_a_timeout_fires_on_time_while_the_only_pool_process_is_busy(processes, workspace):
    slow_ms = 6000
    entity = guarded(workspace, "timed_entry", timeout_ms=1000, timeout_action="ABORT")
    busy = action(workspace, "slow", thought(1, "Think slowly"))
    processes.worker(
        "only", HIERARCH_OFFLINE_LATENCY_MS=str(slow_ms), HIERARCH_HITL_TIMER_SECONDS="0.2"
    )
    run = run_start(entity=entity, input_data={"amount": 1})
    request = wait_until(
        lambda: Approval.objects.filter(run=run, status="PENDING").first(),
        timeout=30,
        what="the request",
        processes=processes,
    )
    # The worker's one pool process now thinks for six seconds, longer than the timeout.
    slow = run_start(entity=busy, input_data={})
    wait_until(
        lambda: RunEvent.objects.filter(run=slow, type="step.started").exists(),
        timeout=30,
        what="the slow step to start",
        processes=processes,
    )
    busy_since = timezone.now()
    fired = wait_until(
        lambda: Approval.objects.filter(pk=request.pk, status="TIMEOUT").first(),
        timeout=slow_ms / 1000,
        what="the timeout to fire while the pool is busy",
        processes=processes,
    )
    late_by = (fired.responded_at - fired.due_at).total_seconds()
    assert late_by < 1.0, f"fired {late_by:.2f} s after its due time"
    assert fired.responded_at < busy_since + timedelta(milliseconds=slow_ms)
    run = wait_for_the_end(run, processes, timeout=60)
    assert (run.status, run.error_code) == ("FAILED", "TIMEOUT")
    print(f"timeout fired {late_by * 1000:.0f} ms after its due time, with the pool busy")
