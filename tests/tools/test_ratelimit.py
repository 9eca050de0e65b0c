"""Tool rate limits: one conformance suite run against the database and Redis backends."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.settings_process import settings_printed
from tests.support.redis_url import require_redis
from tools.models import RateCounter
from tools.ratelimit import (
    ALLOWED,
    DatabaseRateLimiter,
    Decision,
    InvalidRateLimit,
    RateLimitUnavailable,
    RedisRateLimiter,
    acquire,
    parse_limits,
    rate_limit_key,
    rate_limiter,
)

# 12:34:30.25 on 15 January 2025 (UTC): mid-minute, mid-hour.
NOW = 1_736_944_470.25
MINUTE_END = 1_736_944_500.0
HOUR_END = 1_736_946_000.0


class Clock:
    def __init__(self, now: float = NOW):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def redis_limiter(clock) -> Iterator[RedisRateLimiter]:
    """A Redis limiter with keys of its own, deleted afterwards (the database is shared)."""
    prefix = f"hierarch:test-ratelimit:{uuid.uuid4().hex}:"
    limiter = RedisRateLimiter.from_url(require_redis(), prefix=prefix, clock=clock)
    try:
        yield limiter
    finally:
        keys = list(limiter.client.scan_iter(match=prefix + "*"))
        if keys:
            limiter.client.delete(*keys)
        limiter.client.close()


@pytest.fixture(params=["database", "redis"])
def limiter(request, clock):
    if request.param == "database":
        request.getfixturevalue("db")
        return DatabaseRateLimiter(clock=clock)
    return request.getfixturevalue("redis_limiter")


# --- limits and keys -------------------------------------------------------------------------


def test_it_reads_both_windows_longest_first():
    windows = parse_limits({"calls_per_minute": 60, "calls_per_hour": 1000})
    assert [(w.name, w.seconds, w.limit) for w in windows] == [
        ("calls_per_hour", 3600, 1000),
        ("calls_per_minute", 60, 60),
    ]


def test_null_or_missing_limits_set_no_window():
    assert parse_limits({}) == ()
    assert parse_limits(None) == ()
    assert parse_limits({"calls_per_minute": None, "calls_per_hour": None}) == ()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"calls_per_day": 5}, "unknown key 'calls_per_day'"),
        ({"calls_per_minute": 0}, "rate_limit.calls_per_minute must be a whole number"),
        ({"calls_per_minute": -3}, "got -3"),
        ({"calls_per_hour": "100"}, "rate_limit.calls_per_hour must be a whole number"),
        ({"calls_per_hour": 2.5}, "got 2.5"),
        ({"calls_per_minute": True}, "got True"),
        ([60, 1000], "must be an object with calls_per_minute and/or calls_per_hour, not list"),
        ("60/min", "not str"),
    ],
)
def test_malformed_limits_are_refused_naming_the_problem(limits, message):
    with pytest.raises(InvalidRateLimit, match=message.replace("(", r"\(")):
        parse_limits(limits)


def test_a_key_is_per_workspace_and_tool():
    assert rate_limit_key(7, "search") == "ws7:search"
    assert rate_limit_key(7, "search") != rate_limit_key(8, "search")


# --- the conformance suite, on both backends -------------------------------------------------


def test_the_nth_call_passes_and_the_next_is_refused(limiter):
    limits = {"calls_per_minute": 3}
    assert [limiter.acquire("ws1:search", limits) for _ in range(3)] == [ALLOWED] * 3
    refused = limiter.acquire("ws1:search", limits)
    assert refused == Decision(False, MINUTE_END - NOW, "calls_per_minute")


def test_a_limit_of_one_admits_one_call(limiter):
    assert limiter.acquire("ws1:search", {"calls_per_hour": 1}).allowed
    refused = limiter.acquire("ws1:search", {"calls_per_hour": 1})
    assert refused == Decision(False, HOUR_END - NOW, "calls_per_hour")


def test_the_next_minute_admits_again(limiter, clock):
    limits = {"calls_per_minute": 2}
    assert limiter.acquire("k", limits).allowed and limiter.acquire("k", limits).allowed
    assert not limiter.acquire("k", limits).allowed
    clock.now = MINUTE_END - 0.001
    last_moment = limiter.acquire("k", limits)
    assert last_moment == Decision(False, 0.001, "calls_per_minute")
    clock.now = MINUTE_END
    assert limiter.acquire("k", limits).allowed
    assert limiter.acquire("k", limits).allowed
    assert limiter.acquire("k", limits) == Decision(False, 60.0, "calls_per_minute")


def test_the_hour_limit_holds_across_minutes(limiter, clock):
    limits = {"calls_per_minute": 2, "calls_per_hour": 3}
    assert [limiter.acquire("k", limits).allowed for _ in range(3)] == [True, True, False]
    clock.now = NOW + 60
    assert limiter.acquire("k", limits).allowed
    assert limiter.acquire("k", limits) == Decision(False, HOUR_END - NOW - 60, "calls_per_hour")
    clock.now = HOUR_END
    assert limiter.acquire("k", limits).allowed


def test_a_call_the_hour_refuses_is_not_counted_in_the_minute(limiter):
    strict = {"calls_per_minute": 5, "calls_per_hour": 3}
    assert [limiter.acquire("k", strict).allowed for _ in range(3)] == [True, True, True]
    for _ in range(3):
        assert limiter.acquire("k", strict).limit_name == "calls_per_hour"
    # The tool's hourly limit is raised: the minute has counted 3 calls, not 6.
    raised = {"calls_per_minute": 5, "calls_per_hour": 100}
    assert [limiter.acquire("k", raised).allowed for _ in range(3)] == [True, True, False]


def test_keys_are_counted_apart(limiter):
    limits = {"calls_per_minute": 1}
    assert limiter.acquire(rate_limit_key(1, "search"), limits).allowed
    assert limiter.acquire(rate_limit_key(2, "search"), limits).allowed
    assert limiter.acquire(rate_limit_key(1, "fetch"), limits).allowed
    assert not limiter.acquire(rate_limit_key(1, "search"), limits).allowed


def test_no_limit_admits_every_call(limiter):
    assert all(limiter.acquire("k", {}).allowed for _ in range(50))
    assert all(limiter.acquire("k", {"calls_per_minute": None}).allowed for _ in range(50))


def test_bad_input_is_refused_before_counting(limiter):
    with pytest.raises(InvalidRateLimit, match="unknown key 'per_minute'"):
        limiter.acquire("k", {"per_minute": 1})
    with pytest.raises(InvalidRateLimit, match="non-empty string"):
        limiter.acquire("", {"calls_per_minute": 1})
    with pytest.raises(InvalidRateLimit, match="200 characters long; this one has 201"):
        limiter.acquire("k" * 201, {"calls_per_minute": 1})
    assert limiter.acquire("k", {"calls_per_minute": 1}).allowed


# --- what each backend keeps -----------------------------------------------------------------


@pytest.mark.django_db
def test_the_database_keeps_one_row_per_window_and_prunes_past_ones(clock):
    limiter = DatabaseRateLimiter(clock=clock)
    limits = {"calls_per_minute": 10, "calls_per_hour": 100}
    for _ in range(4):
        limiter.acquire("k", limits)
    rows = {(r.window_seconds, r.window_start): r.count for r in RateCounter.objects.all()}
    assert rows == {(60, 1_736_944_440): 4, (3600, 1_736_942_400): 4}
    clock.now = HOUR_END + 5
    limiter.acquire("k", limits)
    rows = {(r.window_seconds, r.window_start): r.count for r in RateCounter.objects.all()}
    assert rows == {(60, 1_736_946_000): 1, (3600, 1_736_946_000): 1}


@pytest.mark.django_db
def test_a_refused_call_leaves_the_counter_at_the_limit(clock):
    limiter = DatabaseRateLimiter(clock=clock)
    for _ in range(5):
        limiter.acquire("k", {"calls_per_minute": 2})
    assert RateCounter.objects.get().count == 2


def test_redis_counters_expire_after_their_window(redis_limiter):
    redis_limiter.acquire("k", {"calls_per_minute": 5, "calls_per_hour": 50})
    ttls = {
        key.decode().rsplit(":", 2)[1]: redis_limiter.client.ttl(key)
        for key in redis_limiter.client.scan_iter(match=redis_limiter.prefix + "*")
    }
    assert set(ttls) == {"60", "3600"}
    assert 60 < ttls["60"] <= 120
    assert 3600 < ttls["3600"] <= 3660


def test_redis_out_of_reach_is_a_clear_error_and_counts_nothing():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    limiter = RedisRateLimiter.from_url(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(RateLimitUnavailable, match="could not be asked \\(ConnectionError\\)"):
        limiter.acquire("k", {"calls_per_minute": 1})


# --- the configured backend ------------------------------------------------------------------


@pytest.mark.django_db
def test_auto_counts_in_the_database_without_redis(settings):
    settings.REDIS_URL = ""
    settings.HIERARCH_RATE_LIMIT_BACKEND = "auto"
    assert isinstance(rate_limiter(), DatabaseRateLimiter)
    assert acquire("ws1:search", {"calls_per_minute": 1}).allowed
    assert not acquire("ws1:search", {"calls_per_minute": 1}).allowed
    assert RateCounter.objects.filter(key="ws1:search").count() == 1


def test_auto_counts_in_redis_when_it_is_configured(settings):
    url = require_redis()
    settings.HIERARCH_RATE_LIMIT_BACKEND = "auto"
    settings.REDIS_URL = url
    limiter = rate_limiter()
    assert isinstance(limiter, RedisRateLimiter)
    key = f"test-{uuid.uuid4().hex}"
    try:
        assert acquire(key, {"calls_per_minute": 1}).allowed
        assert acquire(key, {"calls_per_minute": 1}).limit_name == "calls_per_minute"
    finally:
        for counter in limiter.client.scan_iter(match=f"{limiter.prefix}{{{key}}}*"):
            limiter.client.delete(counter)


@pytest.mark.django_db
def test_database_can_be_chosen_with_redis_configured(settings):
    settings.HIERARCH_RATE_LIMIT_BACKEND = "database"
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert isinstance(rate_limiter(), DatabaseRateLimiter)


def test_a_backend_that_does_not_exist_is_named(settings):
    settings.HIERARCH_RATE_LIMIT_BACKEND = "memcached"
    with pytest.raises(InvalidRateLimit, match="'memcached' is not one of auto, redis, database"):
        rate_limiter()


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    return settings_printed(
        "settings.HIERARCH_RATE_LIMIT_BACKEND", without={"DATABASE_URL", "REDIS_URL"}, **env
    )


def test_settings_refuse_redis_without_redis_url(tmp_path):
    result = _load_settings(HIERARCH_RATE_LIMIT_BACKEND="redis", HIERARCH_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "HIERARCH_RATE_LIMIT_BACKEND=redis needs REDIS_URL to be set" in result.stderr


def test_settings_refuse_an_unknown_backend(tmp_path):
    result = _load_settings(HIERARCH_RATE_LIMIT_BACKEND="disk", HIERARCH_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "HIERARCH_RATE_LIMIT_BACKEND='disk' is not one of auto, redis, database" in (
        result.stderr
    )


def test_settings_default_to_auto(tmp_path):
    result = _load_settings(HIERARCH_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "auto"
