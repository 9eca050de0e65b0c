"""Leases and hints: a worker's lease keeps other workers off its run for as long as it works,
and a delayed hint wakes a run at its due time without a sweeper."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from config.celery import app
from runs.executors import enqueue_at
from runs.models import LLMCall, Run, RunEvent
from runs.services import run_start
from tests.reliability.hierarchies import action, record, thought
from tests.reliability.processes import wait_for_the_end
from tools.models import RecordedRow

pytestmark = pytest.mark.reliability


def test_a_step_longer_than_the_lease_runs_once(processes, workspace):
    # The long step comes second: the run is RUNNING in the database by then.
    entity = action(
        workspace, "ponder", record(1, "started"), thought(2, "Ponder"), record(3, "pondered")
    )
    slow = {"HIERARCH_LEASE_SECONDS": "2", "HIERARCH_OFFLINE_LATENCY_MS": "5000"}
    processes.beat(**slow)
    processes.worker("one", **slow)
    processes.worker("two", **slow)

    run = run_start(entity=entity, input_data={"n": 1})
    run = wait_for_the_end(run, processes, timeout=40)
    endings = RunEvent.objects.filter(run=run, type="run.status").exclude(payload__status="RUNNING")
    assert (run.status, run.error_code, run.error_message) == ("COMPLETED", "", "")
    assert list(endings.values_list("payload__status", flat=True)) == ["COMPLETED"]
    assert LLMCall.objects.filter(run=run).count() == 1
    assert RecordedRow.objects.count() == 2


def test_a_delayed_hint_wakes_the_run_at_its_due_time_without_a_sweeper(processes, workspace):
    entity = action(workspace, "later", record(1, "later"))
    run = run_start(entity=entity, input_data={"n": 1})
    # Forget the start hint: the run waits for its due time, and only the delayed hint (no
    # beat runs) can wake it.
    assert app.control.purge() == 1
    due = timezone.now() + timedelta(seconds=3)
    Run.objects.filter(pk=run.pk).update(wake_at=due)
    enqueue_at(str(run.pk), 60)  # too long for a message: the sweeper's job
    assert app.control.purge() == 0
    enqueue_at(str(run.pk), 3)
    processes.worker("one")

    run = wait_for_the_end(run, processes, timeout=20)
    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    assert due <= run.completed_at < due + timedelta(seconds=2)
    assert RecordedRow.objects.count() == 1
