"""The retry policy in the engine: failed attempts are recorded, the next one is scheduled as
a due time (never a sleep), and error classes outside `retry_on` fail at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run, StepRun, ToolCall
from tests.factories import EntityFactory, tool_definition
from tests.fakes.flaky_server import flaky_server as serve_flaky
from tests.support.queued_runs import Driver
from tests.support.runs import static_plan, step

pytestmark = pytest.mark.smoke


@pytest.fixture(scope="module")
def flaky_server() -> Iterator[tuple[str, Counter]]:
    with serve_flaky() as server:
        yield server


@pytest.fixture
def allow_loopback(settings):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.HIERARCH_HTTP_ALLOW_PRIVATE = True


def fetcher(acme, name: str, url: str, policy: dict):
    tool = tool_definition(
        "fetch",
        implementation="http_request",
        permissions="READ",
        function_schema={
            "name": "fetch",
            "parameters": {
                "type": "object",
                "properties": {"method": {"type": "string"}, "url": {"type": "string"}},
                "required": ["method", "url"],
            },
        },
    )
    plan_step = step(1, "Fetch", "TOOL_CALL", tool_id="fetch")
    plan_step["input_mapping"] = {"method": "GET", "url": url}
    return EntityFactory(
        workspace=acme,
        name=name,
        tools=[tool],
        planning=static_plan(plan_step),
        logic_gate={"retry_policy": policy},
    )


def drive_until_settled(driver: Driver, run: Run) -> Run:
    for _ in range(20):
        driver.drain()
        run.refresh_from_db()
        if run.status in ("COMPLETED", "FAILED") or not driver.later:
            return run
        # The due time is in the database; let it come, as the sweeper would.
        run_id, _delay = driver.later.pop(0)
        Run.objects.filter(pk=run_id).update(wake_at=timezone.now())
        driver.queue.append(run_id)
    return run


def test_a_tool_that_fails_twice_then_succeeds_completes_after_three_attempts(
    db, acme, flaky_server, allow_loopback
):
    base, _seen = flaky_server
    action = fetcher(
        acme,
        "twice",
        f"{base}/fail/2/twice",
        {"max_retries": 3, "backoff_strategy": "LINEAR", "retry_on": ["TOOL_FAILURE"]},
    )
    driver = Driver()
    first = driver.run(action, {})
    assert driver.later == [(str(first.pk), 1.0)]  # LINEAR: 1 s after the first failure
    run = drive_until_settled(driver, first)

    assert run.status == "COMPLETED", run.error_message
    attempts = StepRun.objects.filter(run=run).order_by("attempt")
    assert [(a.attempt, a.status) for a in attempts] == [
        (1, "FAILED"),
        (2, "FAILED"),
        (3, "COMPLETED"),
    ]
    assert ToolCall.objects.filter(run=run).count() == 3


def test_a_retry_waits_for_its_due_time(db, acme, flaky_server, allow_loopback):
    base, _seen = flaky_server
    action = fetcher(
        acme,
        "later",
        f"{base}/fail/1/later",
        {"max_retries": 2, "backoff_strategy": "LINEAR", "retry_on": ["TOOL_FAILURE"]},
    )
    driver = Driver()
    run = driver.run(action, {})
    assert run.status == "RUNNING"
    assert driver.later == [(str(run.pk), 1.0)]
    assert run.wake_at > timezone.now() + timedelta(milliseconds=500)
    # A hint before the due time does nothing.
    driver.engine.advance(str(run.pk))
    assert StepRun.objects.filter(run=run).count() == 1


def test_an_error_class_not_in_retry_on_fails_at_once(db, acme, flaky_server, allow_loopback):
    base, _seen = flaky_server
    action = fetcher(
        acme,
        "never",
        f"{base}/fail/5/never",
        {"max_retries": 3, "backoff_strategy": "NONE", "retry_on": ["LLM_ERROR"]},
    )
    driver = Driver()
    run = drive_until_settled(driver, driver.run(action, {}))
    assert run.status == "FAILED"
    assert run.error_code == "TOOL_FAILURE"
    assert StepRun.objects.filter(run=run).count() == 1


def test_retries_stop_at_max_retries(db, acme, flaky_server, allow_loopback):
    base, _seen = flaky_server
    action = fetcher(
        acme,
        "stubborn",
        f"{base}/fail/10/stubborn",
        {"max_retries": 2, "backoff_strategy": "NONE", "retry_on": ["TOOL_FAILURE"]},
    )
    driver = Driver()
    run = drive_until_settled(driver, driver.run(action, {}))
    assert run.status == "FAILED"
    assert StepRun.objects.filter(run=run).count() == 3
    assert "after 3 attempts" in run.error_message
