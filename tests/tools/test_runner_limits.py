"""Rate limits in the runner: counted before the adapter runs, on the configured backend (the
database on the embedded default, Redis when REDIS_URL is set), refused as RATE_LIMITED with
the wait; and what is not counted."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from runs.engine.ports import (
    PERMISSION_DENIED,
    RATE_LIMITED,
    TOOL_FAILURE,
    VALIDATION_ERROR,
    ToolError,
)
from tests.factories import UserFactory, grant
from tests.tools.conftest import invocation
from tools.models import RecordedRow
from tools.ratelimit import DatabaseRateLimiter, RedisRateLimiter
from tools.runner import RegistryToolRunner

pytestmark = pytest.mark.smoke

MINUTE_START = 1_800_000_000 // 3600 * 3600 + 600  # a minute boundary, mid-hour


@pytest.fixture
def whole_minute() -> None:
    """For the tests on the real clock: start at least 3 s before the minute ends, so that
    their calls all fall into one window."""
    left = 60 - time.time() % 60
    if left < 3:
        time.sleep(left + 0.05)


def saver(limits: dict, **overrides) -> dict:
    """A `record` tool under `limits`, with an id of its own: Redis counters outlive a test."""
    return {
        "tool_id": f"save-{uuid.uuid4().hex[:10]}",
        "name": "Save",
        "implementation": "record",
        "permissions": "WRITE",
        "function_schema": {"name": "save", "parameters": {"type": "object"}},
        "rate_limit": limits,
        **overrides,
    }


def save(runner, tool, workspace, n: int, **kwargs):
    call = invocation(
        tool,
        {"table": "t", "data": {"n": n}},
        key=f"run-1:s{n}:1",
        workspace_id=workspace.pk,
        **kwargs,
    )
    return runner.invoke(call)


def refusal(*args, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as caught:
        save(*args, **kwargs)
    return caught.value


def test_calls_past_the_limit_are_refused_as_rate_limited_without_running(whole_minute, acme):
    runner = RegistryToolRunner()
    tool = saver({"calls_per_minute": 3})
    for n in range(3):
        save(runner, tool, acme, n)
    error = refusal(runner, tool, acme, 3)

    assert error.code == RATE_LIMITED and not error.permanent
    assert 0 < error.retry_after_s <= 60
    assert str(error).startswith(f"tool {tool['tool_id']}: calls_per_minute 3 reached; next call")
    assert RecordedRow.objects.count() == 3


def test_the_refusal_says_how_long_to_wait(acme):
    limiter = DatabaseRateLimiter(clock=lambda: MINUTE_START + 47.7)
    runner = RegistryToolRunner(limiter=limiter)
    tool = saver({"calls_per_minute": 1, "calls_per_hour": 100}, tool_id="search")
    save(runner, tool, acme, 1)
    error = refusal(runner, tool, acme, 2)

    assert str(error) == "tool search: calls_per_minute 1 reached; next call in 12.3 s"
    assert error.retry_after_s == pytest.approx(12.3)


def test_an_hourly_limit_names_itself(acme):
    limiter = DatabaseRateLimiter(clock=lambda: MINUTE_START + 1800)
    runner = RegistryToolRunner(limiter=limiter)
    tool = saver({"calls_per_minute": 10, "calls_per_hour": 2}, tool_id="search")
    save(runner, tool, acme, 1)
    save(runner, tool, acme, 2)
    error = refusal(runner, tool, acme, 3)
    assert str(error) == "tool search: calls_per_hour 2 reached; next call in 1200.0 s"


def test_each_workspace_has_its_own_count(whole_minute, acme, globex):
    runner = RegistryToolRunner()
    tool = saver({"calls_per_minute": 1})
    save(runner, tool, acme, 1)
    save(runner, tool, globex, 2)
    assert refusal(runner, tool, acme, 3).code == RATE_LIMITED


def test_a_tool_without_limits_is_never_refused(acme):
    runner = RegistryToolRunner()
    for limits in ({}, {"calls_per_minute": None, "calls_per_hour": None}):
        tool = saver(limits)
        for n in range(5):
            save(runner, tool, acme, n + len(limits) * 10)
    assert RecordedRow.objects.count() == 10


def test_sandboxed_calls_are_not_counted(whole_minute, acme):
    runner = RegistryToolRunner()
    tool = saver({"calls_per_minute": 1})
    for n in range(3):
        save(runner, tool, acme, n, sandbox=True)
    save(runner, tool, acme, 9)
    assert refusal(runner, tool, acme, 10).code == RATE_LIMITED


def test_a_refused_permission_spends_no_call(whole_minute, acme):
    alice = grant(UserFactory(username="alice"), acme, "designer")
    dave = grant(UserFactory(username="dave"), acme, "operator")
    runner = RegistryToolRunner()
    tool = saver({"calls_per_minute": 1})
    assert refusal(runner, tool, acme, 1, caller_id=alice.pk).code == PERMISSION_DENIED
    save(runner, tool, acme, 2, caller_id=dave.pk)
    assert refusal(runner, tool, acme, 3, caller_id=dave.pk).code == RATE_LIMITED


def test_a_missing_secret_spends_no_call(acme, settings):
    settings.HIERARCH_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    runner = RegistryToolRunner(limiter=DatabaseRateLimiter())
    tool = {
        "tool_id": "crm",
        "implementation": "http_request",
        "permissions": "READ",
        "authentication": {"type": "API_KEY", "credentials_ref": "missing"},
        "rate_limit": {"calls_per_minute": 1},
    }
    for _ in range(2):
        with pytest.raises(ToolError) as caught:
            runner.invoke(invocation(tool, {"url": "http://127.0.0.1:9/"}, workspace_id=acme.pk))
        assert caught.value.code == "SECRET_NOT_FOUND"


def test_an_invalid_rate_limit_is_a_validation_error_naming_it(acme):
    error = refusal(RegistryToolRunner(), saver({"calls_per_minute": 0}), acme, 1)
    assert error.code == VALIDATION_ERROR and error.permanent
    assert "rate_limit.calls_per_minute must be a whole number of calls, 1 or more" in str(error)
    assert not RecordedRow.objects.exists()


def test_an_unreachable_redis_is_a_retryable_failure_naming_it(acme):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    limiter = RedisRateLimiter.from_url(f"redis://127.0.0.1:{port}/0")
    error = refusal(RegistryToolRunner(limiter=limiter), saver({"calls_per_minute": 5}), acme, 1)

    assert error.code == TOOL_FAILURE and not error.permanent
    assert "the Redis rate limiter could not be asked (ConnectionError)" in str(error)
    assert "it may succeed if tried again" in str(error)
    assert not RecordedRow.objects.exists()
