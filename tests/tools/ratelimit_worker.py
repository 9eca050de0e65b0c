"""One worker process of the rate-limit race (tests/tools/test_ratelimit_processes.py).

    python -m tests.tools.ratelimit_worker --barrier DIR --name w1 --key K --keys M
        --limits JSON --calls N --now T [--create-table]

Sets Django up against the environment's DATABASE_URL, REDIS_URL and
HIERARCH_RATE_LIMIT_BACKEND, connects, says it is ready (a file in DIR), waits for the `go`
file, then acquires N times as fast as it can with the clock frozen at T, going round the M
keys `K:0` … `K:M-1` (every key's limit is a boundary where a race could let one call too
many through), and prints one JSON object: the decisions, and when its first and last call
started and ended.
`--create-table` only creates the RateCounter table (a fresh SQLite file) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--barrier", type=Path)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--key")
    parser.add_argument("--keys", type=int, default=1)
    parser.add_argument("--limits", type=json.loads)
    parser.add_argument("--calls", type=int)
    parser.add_argument("--now", type=float)
    parser.add_argument("--create-table", action="store_true")
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    from tools.models import RateCounter
    from tools.ratelimit import rate_limiter

    if options.create_table:
        with connection.schema_editor() as editor:
            editor.create_model(RateCounter)
        return

    limiter = rate_limiter()
    limiter.clock = lambda: options.now  # the same window for everyone, whatever the time
    connection.ensure_connection()
    client = getattr(limiter, "client", None)
    if client is not None:
        client.ping()
    (options.barrier / f"ready-{options.name}").touch()
    go = options.barrier / "go"
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("no go after 60 s")
        time.sleep(0.0005)

    decisions = []
    first = time.time()
    keys = [f"{options.key}:{number}" for number in range(options.keys)]
    for number in range(options.calls):
        decision = limiter.acquire(keys[number % options.keys], options.limits)
        decisions.append([decision.allowed, decision.retry_after_s, decision.limit_name])
    last = time.time()
    json.dump({"decisions": decisions, "first": first, "last": last}, sys.stdout)


if __name__ == "__main__":
    main()
