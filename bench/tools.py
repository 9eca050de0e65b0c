"""What the tool runner's checks cost per call: permission, rate limit, credentials.

    DATABASE_URL=postgres://… [REDIS_URL=redis://…] .venv/bin/python bench/tools.py
        [--calls 2000] [--json]

Runs `RegistryToolRunner.invoke` on a no-op adapter (it returns {} at once), so what is timed
is the runner's own work: the argument check every call has, then each case's checks. The
caller is an operator of a fresh workspace of the database of DATABASE_URL (migrated first;
SQLite by default). Rate limits are counted on the database, and on Redis when REDIS_URL is
set, under a limit never reached. Prints mean, median and 95th percentile milliseconds per
call, and the overhead of each case over the plain READ call, or one JSON line with --json.
Leaves its workspace (audit records are append-only), removes the rate counters.
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
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from entities.models import Workspace  # noqa: E402
from governance.permissions import membership_grant  # noqa: E402
from governance.vault import secret_set  # noqa: E402
from runs.engine.ports import ToolInvocation  # noqa: E402
from tools.access import ToolAccess  # noqa: E402
from tools.builtin import Builtin  # noqa: E402
from tools.credentials import Authenticator  # noqa: E402
from tools.models import RateCounter  # noqa: E402
from tools.ratelimit import DatabaseRateLimiter, RateLimiter, RedisRateLimiter  # noqa: E402
from tools.runner import RegistryToolRunner  # noqa: E402
from tools.services import tool_grant_add, tool_upsert  # noqa: E402

ROOMY = {"calls_per_minute": 10**9, "calls_per_hour": 10**9}  # counted, never reached
PARAMETERS = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def _noop(arguments: dict, context: Any) -> dict:
    return {}


NOOP = Builtin("noop", {}, run=_noop, sandbox=_noop)
NOOP_SENDING = Builtin("noop_sending", {}, run=_noop, sandbox=_noop, sends_credentials=True)


def tool(tool_id: str, permissions: str = "READ", **extra: Any) -> dict:
    return {
        "tool_id": tool_id,
        "name": tool_id,
        "implementation": "noop_sending" if "authentication" in extra else "noop",
        "permissions": permissions,
        "function_schema": {"name": tool_id, "parameters": PARAMETERS},
        **extra,
    }


def timed(call: Callable[[], Any], calls: int) -> dict[str, float]:
    for _ in range(min(50, calls)):  # warm: connections, caches, compiled schemas
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "mean_ms": round(statistics.fmean(samples), 4),
        "p50_ms": round(samples[len(samples) // 2], 4),
        "p95_ms": round(samples[int(len(samples) * 0.95)], 4),
    }


class Setup:
    """A workspace with an operator, an EXECUTE grant and two secrets; removed by `drop`."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.tag = tag
        self.workspace = Workspace.objects.create(name=f"Bench {tag}", slug=f"bench-{tag}")
        users = get_user_model().objects
        self.operator = users.create_user(username=f"bench-op-{tag}", password=None)
        membership_grant(workspace=self.workspace, user=self.operator, role="operator")
        launch = tool_upsert(
            workspace=self.workspace,
            definition={"tool_id": "launch", "name": "Launch", "permissions": "EXECUTE"},
        )
        tool_grant_add(tool=launch, user=self.operator)
        secret_set(workspace=self.workspace, name="bench_key", value="sk-bench-" + "k" * 32)

    def drop(self, limiters: list[RateLimiter]) -> None:
        """Remove the rate counters; the workspace stays, as bench/engine.py's do (its audit
        records are append-only)."""
        RateCounter.objects.filter(key__startswith=f"ws{self.workspace.pk}:").delete()
        for limiter in limiters:
            if isinstance(limiter, RedisRateLimiter):
                match = f"{limiter.prefix}{{ws{self.workspace.pk}:*"
                for key in limiter.client.scan_iter(match=match):
                    limiter.client.delete(key)


def cases(setup: Setup, limiter: RateLimiter, label: str) -> dict[str, Callable[[], Any]]:
    workspace_id, caller = setup.workspace.pk, setup.operator.pk
    warm = RegistryToolRunner(
        builtins={"noop": NOOP, "noop_sending": NOOP_SENDING},
        access=ToolAccess(),
        authenticator=Authenticator(),
        limiter=limiter,
    )
    cold = RegistryToolRunner(
        builtins={"noop": NOOP, "noop_sending": NOOP_SENDING},
        access=ToolAccess(ttl_s=0),
        limiter=limiter,
    )

    def call(runner: RegistryToolRunner, definition: dict) -> Callable[[], Any]:
        invocation = ToolInvocation(
            tool=definition,
            arguments={"text": "hello"},
            idempotency_key="bench:step:1",
            workspace_id=workspace_id,
            run_id="bench",
            caller_id=caller,
        )
        return lambda: runner.invoke(invocation)

    api_key = {"type": "API_KEY", "credentials_ref": "bench_key"}
    return {
        "READ, no auth, no limit": call(warm, tool("search")),
        "WRITE, permission cached": call(warm, tool("save", "WRITE")),
        "WRITE, permission read": call(cold, tool("save", "WRITE")),
        "EXECUTE, grant cached": call(warm, tool("launch", "EXECUTE")),
        f"READ, rate limit ({label})": call(warm, tool("search_limited", rate_limit=ROOMY)),
        f"WRITE + rate limit ({label})": call(
            warm, tool("save_limited", "WRITE", rate_limit=ROOMY)
        ),
        "READ, API_KEY from the vault": call(warm, tool("crm", authentication=api_key)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    call_command("migrate", verbosity=0)
    setup = Setup()
    results: dict[str, dict[str, float]] = {}
    backends: list[tuple[str, RateLimiter]] = [
        (f"database {connection.vendor}", DatabaseRateLimiter())
    ]
    if settings.REDIS_URL:
        backends.append(("redis", RedisRateLimiter.from_url(settings.REDIS_URL)))
    try:
        for label, limiter in backends:
            for case, function in cases(setup, limiter, label).items():
                if case not in results:
                    results[case] = timed(function, options.calls)
    finally:
        setup.drop([limiter for _, limiter in backends])
    base = results["READ, no auth, no limit"]["p50_ms"]
    for figures in results.values():
        figures["overhead_p50_ms"] = round(figures["p50_ms"] - base, 4)

    if options.json:
        print(json.dumps({"calls": options.calls, "database": connection.vendor, **results}))
        return
    print(f"RegistryToolRunner.invoke on a no-op adapter, {options.calls} calls per case, ms")
    for case, n in results.items():
        print(
            f"  {case:<38} mean {n['mean_ms']:7.3f}  p50 {n['p50_ms']:7.3f}  "
            f"p95 {n['p95_ms']:7.3f}  over READ (p50) {n['overhead_p50_ms']:+7.3f}"
        )


if __name__ == "__main__":
    main()
