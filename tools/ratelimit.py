"""Tool rate limits (seed 000 §3.6.1 `rate_limit`) that hold across every worker process.

    decision = acquire(rate_limit_key(workspace_id, tool_id), tool["rate_limit"])
    if not decision.allowed:
        ...  # refuse the call; try again in decision.retry_after_s seconds

`calls_per_minute` and `calls_per_hour` are fixed windows aligned on the clock (UTC): at most N
calls in each calendar minute, at most M in each calendar hour. One acquire checks both and
counts the call in both, or in neither: a call refused by the hour leaves the minute's count
as it was. A refusal names the limit that refused and how long until its window ends. Like any
fixed window, a burst straddling a boundary may make up to 2N calls within 60 seconds (N at
the end of one minute, N at the start of the next), never more than N in one minute.

Two backends, one interface (`RateLimiter.acquire`):

- `RedisRateLimiter`: one Lua script per call checks and increments both windows' counters
  atomically (Redis runs a script alone); keys expire after their window.
- `DatabaseRateLimiter`: a `RateCounter` row per key and window, incremented by
  `INSERT … ON CONFLICT … DO UPDATE … WHERE count < limit RETURNING count`, one statement that
  admits or refuses under the row's lock (PostgreSQL and SQLite alike); both windows in one
  transaction, rolled back when the second refuses. Call it outside a transaction: inside one,
  the counter row stays locked until that transaction ends (other workers calling the same tool
  wait for it) and a rollback gives the call back.

`settings.HIERARCH_RATE_LIMIT_BACKEND` picks one: `redis`, `database`, or `auto` (Redis when
`REDIS_URL` is set). The window is read from each process's clock (`clock`, injectable): workers
on different machines need synchronised clocks (NTP), as for every other timestamp.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

CALLS_PER_MINUTE = "calls_per_minute"
CALLS_PER_HOUR = "calls_per_hour"
# Longest window first: a refusal by the hour waits for the hour (a minute boundary too).
WINDOWS: dict[str, int] = {CALLS_PER_HOUR: 3600, CALLS_PER_MINUTE: 60}
MAX_KEY_LENGTH = 200


@dataclass(frozen=True)
class Decision:
    """Whether a call may go ahead; if not, which limit refused and for how long."""

    allowed: bool
    retry_after_s: float = 0.0
    limit_name: str | None = None


ALLOWED = Decision(allowed=True)


class InvalidRateLimit(ValueError):
    """A rate_limit or key that cannot be counted; the message names the problem."""


class RateLimitUnavailable(RuntimeError):
    """The backend could not be asked (Redis down); the call was neither counted nor made."""


class RateLimiter(Protocol):
    def acquire(self, key: str, limits: Mapping[str, Any]) -> Decision:
        """Count one call of `key` against `limits`, or refuse it without counting."""
        ...


@dataclass(frozen=True)
class Window:
    name: str  # calls_per_minute or calls_per_hour
    seconds: int
    limit: int

    def start(self, now: float) -> int:
        return int(now // self.seconds) * self.seconds

    def refusal(self, now: float) -> Decision:
        # Never zero: a caller told "retry after 0" would spin.
        wait = max(self.start(now) + self.seconds - now, 0.001)
        return Decision(allowed=False, retry_after_s=round(wait, 3), limit_name=self.name)


def rate_limit_key(workspace_id: int | str, tool_id: str) -> str:
    """The key of one tool of one workspace: its limits are its own in each workspace."""
    return f"ws{workspace_id}:{tool_id}"


def parse_limits(limits: Mapping[str, Any] | None) -> tuple[Window, ...]:
    """The windows a tool's `rate_limit` sets, longest first; InvalidRateLimit naming the
    problem for anything else than {"calls_per_minute": int ≥ 1 | null, "calls_per_hour": …}."""
    if limits is None:
        return ()
    if not isinstance(limits, Mapping):
        raise InvalidRateLimit(
            f"rate_limit must be an object with {CALLS_PER_MINUTE} and/or {CALLS_PER_HOUR}, "
            f"not {type(limits).__name__}"
        )
    unknown = sorted(str(name) for name in limits if name not in WINDOWS)
    if unknown:
        raise InvalidRateLimit(
            f"rate_limit has unknown key {unknown[0]!r}; use {CALLS_PER_MINUTE} or {CALLS_PER_HOUR}"
        )
    windows = []
    for name, seconds in WINDOWS.items():
        value = limits.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRateLimit(
                f"rate_limit.{name} must be a whole number of calls, 1 or more, or null; "
                f"got {value!r}"
            )
        windows.append(Window(name, seconds, value))
    return tuple(windows)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidRateLimit(f"a rate-limit key must be a non-empty string, not {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidRateLimit(
            f"a rate-limit key may be {MAX_KEY_LENGTH} characters long; this one has {len(key)}"
        )


# --- Redis -----------------------------------------------------------------------------------

# KEYS[i]: window i's counter. ARGV[2i-1]: its limit, ARGV[2i]: its lifetime in seconds.
# Returns 0 when the call is counted in every window, else the number of the window refusing.
_LUA = """
for i = 1, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count >= tonumber(ARGV[2 * i - 1]) then
    return i
  end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('EXPIRE', KEYS[i], ARGV[2 * i])
  end
end
return 0
"""


class RedisRateLimiter:
    """Counters in Redis, checked and incremented by one atomic Lua script per call."""

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "hierarch:ratelimit:",
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.prefix = prefix
        self.clock = clock
        self._script = client.register_script(_LUA)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisRateLimiter:
        import redis  # only a process that counts in Redis loads its client

        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return cls(client, **kwargs)

    def acquire(self, key: str, limits: Mapping[str, Any]) -> Decision:
        windows = parse_limits(limits)
        _check_key(key)
        if not windows:
            return ALLOWED
        now = self.clock()
        # One hash tag per key: on a Redis Cluster, all its counters live in one slot.
        keys = [f"{self.prefix}{{{key}}}:{w.seconds}:{w.start(now)}" for w in windows]
        arguments: list[int] = []
        for window in windows:
            arguments += [window.limit, window.seconds + 60]
        import redis  # loaded already by from_url

        try:
            refused = int(self._script(keys=keys, args=arguments))
        except redis.RedisError as exc:
            raise RateLimitUnavailable(
                f"the Redis rate limiter could not be asked ({type(exc).__name__}); "
                "the call was not counted"
            ) from None
        return ALLOWED if refused == 0 else windows[refused - 1].refusal(now)


# --- the database ----------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, window: Window):
        self.window = window


class DatabaseRateLimiter:
    """Counters in `RateCounter` rows, one atomic conditional upsert per window."""

    def __init__(self, *, using: str = "default", clock: Callable[[], float] = time.time):
        self.using = using
        self.clock = clock
        self._sql: tuple[str, str] | None = None

    def acquire(self, key: str, limits: Mapping[str, Any]) -> Decision:
        # The limiters' arithmetic and the Redis one need no Django settings; only the
        # database limiter does, when it counts.
        from django.db import connections, transaction

        windows = parse_limits(limits)
        _check_key(key)
        if not windows:
            return ALLOWED
        now = self.clock()
        connection = connections[self.using]
        upsert, prune = self._statements(connection)
        try:
            with transaction.atomic(using=self.using), connection.cursor() as cursor:
                for window in windows:
                    start = window.start(now)
                    cursor.execute(upsert, [key, window.seconds, start, window.limit])
                    row = cursor.fetchone()
                    if row is None:  # the WHERE refused: the window is full
                        raise _Refused(window)
                    if row[0] == 1:  # a new window: the key's past ones are done with
                        cursor.execute(prune, [key, window.seconds, start])
        except _Refused as refused:  # raised inside atomic: the other windows rolled back
            return refused.window.refusal(now)
        return ALLOWED

    def _statements(self, connection: Any) -> tuple[str, str]:
        if self._sql is None:
            from tools.models import RateCounter  # see acquire: Django only when counting

            q = connection.ops.quote_name
            table = q(RateCounter._meta.db_table)
            key, seconds, start, count = (
                q(name) for name in ("key", "window_seconds", "window_start", "count")
            )
            # S608: only quoted identifiers of our own model are formatted in; values are bound.
            upsert = (
                f"INSERT INTO {table} ({key}, {seconds}, {start}, {count}) "  # noqa: S608
                f"VALUES (%s, %s, %s, 1) "
                f"ON CONFLICT ({key}, {start}, {seconds}) "
                f"DO UPDATE SET {count} = {table}.{count} + 1 "
                f"WHERE {table}.{count} < %s "
                f"RETURNING {count}"
            )
            prune = (
                f"DELETE FROM {table} "  # noqa: S608
                f"WHERE {key} = %s AND {seconds} = %s AND {start} < %s"
            )
            self._sql = (upsert, prune)
        return self._sql


# --- the configured backend ------------------------------------------------------------------

_limiters: dict[tuple[str, str], RateLimiter] = {}
_limiters_lock = threading.Lock()


def rate_limiter() -> RateLimiter:
    """The backend the settings choose, one per process (and per setting, for tests)."""
    from django.conf import settings  # see DatabaseRateLimiter.acquire

    choice = getattr(settings, "HIERARCH_RATE_LIMIT_BACKEND", "auto")
    url = getattr(settings, "REDIS_URL", "") or ""
    if choice == "auto":
        choice = "redis" if url else "database"
    if choice not in ("redis", "database"):
        raise InvalidRateLimit(
            f"HIERARCH_RATE_LIMIT_BACKEND={choice!r} is not one of auto, redis, database"
        )
    if choice == "redis" and not url:
        raise InvalidRateLimit("HIERARCH_RATE_LIMIT_BACKEND=redis needs REDIS_URL to be set")
    cache_key = (choice, url if choice == "redis" else "")
    limiter = _limiters.get(cache_key)
    if limiter is None:
        with _limiters_lock:
            limiter = _limiters.get(cache_key)
            if limiter is None:
                limiter = (
                    RedisRateLimiter.from_url(url) if choice == "redis" else DatabaseRateLimiter()
                )
                _limiters[cache_key] = limiter
    return limiter


def acquire(key: str, limits: Mapping[str, Any]) -> Decision:
    """Count one call of `key` on the configured backend, or refuse it (see the module doc)."""
    return rate_limiter().acquire(key, limits)
