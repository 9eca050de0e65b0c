"""Three worker processes hammer one tool's rate limit at once: exactly the limit is admitted.

Each backend is raced by real OS processes (`tests/tools/ratelimit_worker.py`), each with its
own connection: PostgreSQL (this test's database), Redis, and a SQLite file in WAL mode as the
embedded default uses it. The workers' clocks are frozen in one window, so the only thing that
can let an extra call through is the counting itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.support.database import database_url
from tests.support.redis_url import require_redis
from tools.models import RateCounter

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
CALLS = 150  # per worker, per round
KEYS = 10  # the workers go round ten tools: ten limits to reach in each round
LIMITS = {"calls_per_minute": 20, "calls_per_hour": 30}
PER_KEY = [(60, 10), (3600, 30)]  # counts after both rounds: the second minute's, the hour's


def _now() -> float:
    """Mid-minute in the middle of the current hour: the next minute is in the same hour."""
    hour = int(time.time() // 3600) * 3600
    return hour + 1830.25


def race(tmp_path: Path, env: dict[str, str], key: str, now: float) -> list[dict[str, Any]]:
    """Start the workers, release them together, and return what each one saw."""
    barrier = tmp_path / f"barrier-{uuid.uuid4().hex}"
    barrier.mkdir()
    processes = [
        subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [
                sys.executable,
                "-m",
                "tests.tools.ratelimit_worker",
                "--barrier",
                str(barrier),
                "--name",
                f"w{number}",
                "--key",
                key,
                "--keys",
                str(KEYS),
                "--limits",
                json.dumps(LIMITS),
                "--calls",
                str(CALLS),
                "--now",
                repr(now),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for number in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 90
        while len(list(barrier.glob("ready-*"))) < WORKERS:
            failed = [p for p in processes if p.poll() is not None]
            if failed:
                raise AssertionError(f"a worker died before the race: {failed[0].stderr.read()}")
            assert time.monotonic() < deadline, "the workers were not ready after 90 s"
            time.sleep(0.02)
        (barrier / "go").touch()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            results.append(json.loads(out))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def admitted(results: list[dict[str, Any]]) -> int:
    return sum(allowed for result in results for allowed, _, _ in result["decisions"])


def refusals(results: list[dict[str, Any]]) -> list[tuple[float, str]]:
    return [
        (retry_after, name)
        for result in results
        for allowed, retry_after, name in result["decisions"]
        if not allowed
    ]


def assert_raced(results: list[dict[str, Any]]) -> None:
    """Every worker was still calling when every other had started: they overlapped."""
    assert max(r["first"] for r in results) < min(r["last"] for r in results)


def check_both_rounds(tmp_path: Path, env: dict[str, str], key: str) -> None:
    now = _now()
    minute_left = (int(now // 60) * 60 + 60) - now
    hour_left = (int(now // 3600) * 3600 + 3600) - now

    first = race(tmp_path, env, key, now)
    assert_raced(first)
    assert admitted(first) == KEYS * 20  # each key's minute limit, exactly
    assert set(refusals(first)) == {(round(minute_left, 3), "calls_per_minute")}
    assert len(refusals(first)) == WORKERS * CALLS - KEYS * 20

    # The next minute of the same hour: each key's hour has 10 calls left, and only those pass.
    second = race(tmp_path, env, key, now + 60)
    assert_raced(second)
    assert admitted(second) == KEYS * 10
    assert set(refusals(second)) == {(round(hour_left - 60, 3), "calls_per_hour")}


def _worker_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env.update(overrides)
    return env


@pytest.mark.django_db(transaction=True)
def test_three_processes_on_postgresql_admit_exactly_the_limit(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL (set DATABASE_URL): it races the PostgreSQL counters; the "
            "SQLite race below has a file of its own"
        )
    env = _worker_env(DATABASE_URL=database_url(), HIERARCH_RATE_LIMIT_BACKEND="database")
    check_both_rounds(tmp_path, env, "ws1:search")
    # Per key: the second minute's row and the hour's; the first minute's was pruned when the
    # second began.
    rows = sorted(RateCounter.objects.values_list("key", "window_seconds", "count"))
    assert rows == sorted(
        (f"ws1:search:{n}", seconds, count) for n in range(KEYS) for seconds, count in PER_KEY
    )


def test_three_processes_on_redis_admit_exactly_the_limit(tmp_path):
    url = require_redis()
    key = f"race-{uuid.uuid4().hex}"
    env = _worker_env(
        REDIS_URL=url,
        HIERARCH_RATE_LIMIT_BACKEND="redis",
        HIERARCH_VAR_DIR=str(tmp_path),  # an unused SQLite file, not the developer's
    )
    import redis

    client = redis.Redis.from_url(url)
    try:
        check_both_rounds(tmp_path, env, key)
        counters = sorted(
            (int(k.decode().rsplit(":", 2)[1]), int(client.get(k)))
            for k in client.scan_iter(match=f"hierarch:ratelimit:{{{key}:*")
        )
        # Per key: both minutes (nothing prunes in Redis, keys expire) and the hour.
        assert counters == sorted([(60, 20), *PER_KEY] * KEYS)
    finally:
        for counter in client.scan_iter(match=f"hierarch:ratelimit:{{{key}:*"):
            client.delete(counter)
        client.close()


def test_three_processes_on_a_sqlite_file_admit_exactly_the_limit(tmp_path):
    url = f"sqlite:///{tmp_path / 'embedded.sqlite3'}"
    env = _worker_env(DATABASE_URL=url, HIERARCH_RATE_LIMIT_BACKEND="database")
    subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "tests.tools.ratelimit_worker", "--create-table"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
    )
    check_both_rounds(tmp_path, env, "ws1:search")
    with contextlib.closing(sqlite3.connect(tmp_path / "embedded.sqlite3")) as db:
        rows = db.execute(
            "SELECT window_seconds, count FROM tools_ratecounter ORDER BY window_seconds"
        ).fetchall()
    assert rows == sorted(PER_KEY * KEYS)  # the first minute's rows were pruned
