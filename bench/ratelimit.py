"""Per-call cost of a tool rate-limit check, on each backend.

    DATABASE_URL=postgres://… [REDIS_URL=redis://…] .venv/bin/python bench/ratelimit.py
        [--calls 2000] [--json]

Times `acquire` call by call on the database of DATABASE_URL (migrated first; SQLite by
default) and, when REDIS_URL is set, on Redis: admitted calls with one window and with both
(`calls_per_minute` and `calls_per_hour`), and refused calls. Prints mean, median and 95th
percentile milliseconds per call, or one JSON line with --json. Cleans up the counters it made.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from tools.models import RateCounter  # noqa: E402
from tools.ratelimit import DatabaseRateLimiter, RateLimiter, RedisRateLimiter  # noqa: E402

ROOMY = 10**9  # a limit never reached: every call is admitted and counted
CASES: dict[str, dict[str, int]] = {
    "admit, one window": {"calls_per_minute": ROOMY},
    "admit, both windows": {"calls_per_minute": ROOMY, "calls_per_hour": ROOMY},
    "refuse": {"calls_per_minute": 1, "calls_per_hour": ROOMY},
}


def timed(call: Callable[[], Any], calls: int) -> dict[str, float]:
    for _ in range(min(50, calls)):  # warm: connection, prepared script, caches
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "mean_ms": round(statistics.fmean(samples), 3),
        "p50_ms": round(samples[len(samples) // 2], 3),
        "p95_ms": round(samples[int(len(samples) * 0.95)], 3),
    }


def measure(limiter: RateLimiter, prefix: str, calls: int) -> dict[str, dict[str, float]]:
    figures = {}
    for case, limits in CASES.items():
        key = f"{prefix}:{case.replace(' ', '-').replace(',', '')}"
        figures[case] = timed(lambda key=key, limits=limits: limiter.acquire(key, limits), calls)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    call_command("migrate", verbosity=0)
    prefix = f"bench-{uuid.uuid4().hex[:12]}"
    results: dict[str, Any] = {}
    try:
        results[f"database ({connection.vendor})"] = measure(
            DatabaseRateLimiter(), prefix, options.calls
        )
    finally:
        RateCounter.objects.filter(key__startswith=prefix).delete()
    if settings.REDIS_URL:
        limiter = RedisRateLimiter.from_url(settings.REDIS_URL)
        try:
            results["redis"] = measure(limiter, prefix, options.calls)
        finally:
            for key in limiter.client.scan_iter(match=f"{limiter.prefix}{{{prefix}*"):
                limiter.client.delete(key)

    if options.json:
        print(json.dumps({"calls": options.calls, "results": results}))
        return
    print(f"acquire(), {options.calls} calls per case, ms per call")
    for backend, figures in results.items():
        for case, numbers in figures.items():
            print(
                f"  {backend:<22} {case:<20} mean {numbers['mean_ms']:7.3f}  "
                f"p50 {numbers['p50_ms']:7.3f}  p95 {numbers['p95_ms']:7.3f}"
            )


if __name__ == "__main__":
    main()
