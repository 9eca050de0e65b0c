"""A process that dies mid-step loses nothing: its lease expires, the sweeper hands the run to
another process, the run resumes at the first step without a recorded result, and no side
effect happens twice."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from django.utils import timezone

from runs.models import LLMCall, Run, RunEvent, StepRun, ToolCall
from runs.services import run_start
from tests.reliability.hierarchies import action, record, thought
from tests.reliability.processes import LEASE_SECONDS, free_port, wait_for_the_end, wait_until
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability

SLOW_MS = "1500"  # each model call; a step is "in flight" for this long
TABLES = ("drafted", "reviewed", "approved")
INPUT = {"order": 7}


def ledger(workspace):
    """Three slow model steps, each followed by a recorded side effect."""
    return action(
        workspace,
        "ledger",
        thought(1, "Draft"),
        record(2, "drafted"),
        thought(3, "Review"),
        record(4, "reviewed"),
        thought(5, "Approve"),
        record(6, "approved"),
    )


def kill_inside_the_second_model_call(processes, process, run_id):
    """Wait for the first side effect, then kill while the next (slow) model call runs."""
    wait_until(
        lambda: RecordedRow.objects.filter(run_id=run_id).exists(),
        timeout=30,
        what="the first recorded row",
        processes=processes,
    )
    time.sleep(0.5)
    processes.kill(process)
    killed_at = timezone.now()
    # The kill landed mid-run, inside the second model call: nothing of it is recorded.
    run = Run.objects.get(pk=run_id)
    assert run.status == "RUNNING", run.status
    assert LLMCall.objects.filter(run_id=run_id).count() == 1
    assert RecordedRow.objects.filter(run_id=run_id).count() == 1
    return killed_at


def assert_every_effect_happened_once(run):
    rows = list(RecordedRow.objects.filter(run_id=str(run.pk)))
    assert sorted(row.table for row in rows) == sorted(TABLES)
    assert all(row.data == INPUT for row in rows)
    assert len({row.idempotency_key for row in rows}) == len(TABLES)

    tool_calls = list(ToolCall.objects.filter(run=run))
    assert len(tool_calls) == len(TABLES) and all(call.success for call in tool_calls)
    assert Counter(call.metadata["step"] for call in tool_calls) == Counter(
        {"s2": 1, "s4": 1, "s6": 1}
    )

    model_calls = list(LLMCall.objects.filter(run=run))
    assert Counter(call.metadata["step"] for call in model_calls) == Counter(
        {"s1": 1, "s3": 1, "s5": 1}
    )
    assert len({call.call_key for call in model_calls}) == 3
    run.refresh_from_db()
    assert (run.llm_calls, run.tool_calls) == (3, 3)

    steps = StepRun.objects.filter(run=run, status="COMPLETED")
    assert Counter(steps.values_list("step_key", flat=True)) == Counter(
        {f"s{order}": 1 for order in range(1, 7)}
    )
    assert not StepRun.objects.filter(run=run).exclude(status="COMPLETED").exists()


def resumed_after(run, moment) -> float:
    """Seconds from `moment` to the first event the resumed run wrote."""
    first = (
        RunEvent.objects.filter(trace_id=run.trace_id, created_at__gt=moment)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    assert first is not None
    return (first - moment).total_seconds()


def test_a_run_survives_its_celery_worker_being_killed_mid_step(processes, workspace):
    entity = ledger(workspace)
    processes.beat()
    first = processes.worker("first", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    run = run_start(entity=entity, input_data=INPUT)

    killed_at = kill_inside_the_second_model_call(processes, first, str(run.pk))
    restarted_at = timezone.now()
    processes.worker("second", HIERARCH_OFFLINE_LATENCY_MS=SLOW_MS)
    run = wait_for_the_end(run, processes, timeout=60)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert_every_effect_happened_once(run)
    # The dead worker's lease (LEASE_SECONDS) had to expire first; then the next sweep.
    resumed_in = resumed_after(run, restarted_at)
    assert resumed_in < 30
    print(
        f"killed {(killed_at - run.created_at).total_seconds():.1f} s into the run; resumed "
        f"{resumed_in:.1f} s after the new worker started (lease {LEASE_SECONDS} s); "
        f"completed {(run.completed_at - restarted_at).total_seconds():.1f} s after it"
    )


def test_a_run_survives_its_inline_server_being_killed_mid_step(processes, workspace):
    entity = ledger(workspace)
    inline = {"HIERARCH_EXECUTOR": "inline", "HIERARCH_OFFLINE_LATENCY_MS": SLOW_MS}
    # The first process runs the run in its own thread pool, as the server does.
    command = processes.start(
        "run_entity",
        "manage.py",
        "run_entity",
        entity.name,
        "--workspace",
        workspace.slug,
        "--input",
        json.dumps(INPUT),
        "--wait",
        "--timeout",
        "60",
        **inline,
    )
    run = wait_until(
        lambda: Run.objects.filter(entity=entity).first(),
        timeout=30,
        what="the run to start",
        processes=processes,
    )

    kill_inside_the_second_model_call(processes, command, str(run.pk))
    restarted_at = timezone.now()
    # The server restarts: config.asgi starts the inline executor's sweeper.
    processes.start(
        "daphne",
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(free_port()),
        "config.asgi:application",
        **inline,
    )
    run = wait_for_the_end(run, processes, timeout=60)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert_every_effect_happened_once(run)
    resumed_in = resumed_after(run, restarted_at)
    assert resumed_in < 30
    print(f"resumed {resumed_in:.1f} s after the server restarted (lease {LEASE_SECONDS} s)")
