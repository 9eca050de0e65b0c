"""Live pages across processes in the embedded default (no Redis): how long from another
process's commit to the server's websocket, through the live relay (runs/relay.py).

    .venv/bin/python bench/live_embedded.py [--samples 40] [--postgres] [--json]

The server is daphne serving config.asgi:application as `make run` does (inline executor,
in-memory channel layer, no REDIS_URL), on a fresh SQLite file (WAL) in a temporary
directory, or with --postgres on DATABASE_URL (by default a fresh database created and
dropped here). This process is the other process (as `manage.py run_entity` is): it writes,
and two websocket clients (aiohttp, with a session cookie and the Origin a browser sends)
listen on the server:

1. trace: `/ws/runs/<trace>/`; this process commits one event to the trace (the run store's
   `append_events`), and the figure runs from just before the commit to the frame's arrival.
2. inbox: `/ws/approvals/?list=open` of an approver; this process creates a request and
   broadcasts it (`broadcast_inbox`, which records it for the relay in the same
   transaction); to the arrival of the pushed row (the server renders the inbox for it).

Samples are spaced by a random 0-0.5 s, so they fall anywhere in the relay's poll interval
(HIERARCH_LIVE_RELAY_SECONDS, 0.25 s by default): the median is about half the interval plus
the work. Also the cost of one poll of the relay in this process (one watched trace, nothing
new): the server's idle price. One clock (one machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import (  # noqa: E402 - bench/harness.py
    Processes,
    database_create,
    database_drop,
    free_port,
    summary,
    until_up,
)

ACTION = {
    "metadata": {"type": "ACTION", "status": "ACTIVE", "tags": []},
    "identity": {"name": "listener", "description": "A run for the trace to belong to."},
    "hierarchy": {"children": []},
}


def environment(var_dir: str, database_url: str) -> dict[str, str]:
    """`make run`'s environment: production settings over plain HTTP on loopback, no Redis."""
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-" + "k" * 50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "0",
        "SECURE_HSTS_PRELOAD": "0",
        "HIERARCH_EXECUTOR": "inline",
        "HIERARCH_VAR_DIR": var_dir,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(ROOT),
    }


def setup() -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from entities.models import Workspace
    from entities.services import entity_save
    from governance.permissions import membership_grant
    from runs.models import Run, RunStatus
    from runs.store import latest_version

    tag = secrets.token_hex(4)
    workspace = Workspace.objects.create(name="Bench live", slug=f"bench-live-{tag}")
    user = get_user_model().objects.create_user(f"approver-{tag}", password=secrets.token_hex())
    membership_grant(workspace=workspace, user=user, role="approver")
    entity = entity_save(workspace=workspace, definition=ACTION).entity
    run_id = uuid.uuid4()
    run = Run.objects.create(
        id=run_id,
        trace_id=run_id,
        workspace=workspace,
        entity=entity,
        entity_version=latest_version(entity),
        status=RunStatus.PAUSED,
    )
    client = Client()
    client.force_login(user)
    return {"run": run, "cookie": f"sessionid={client.cookies['sessionid'].value}"}


def commit_event(run: Any, n: int) -> float:
    from django.db import transaction

    from runs.store import append_events

    started = time.time()
    with transaction.atomic():
        append_events(str(run.trace_id), str(run.pk), [("bench.ping", {"n": n})])
    return started


def commit_request(run: Any) -> tuple[int, float]:
    from django.db import transaction

    from approvals.models import Approval
    from approvals.services import broadcast_inbox

    started = time.time()
    with transaction.atomic():
        approval = Approval.objects.create(
            run=run,
            workspace_id=run.workspace_id,
            entity_id=run.entity_id,
            trace_id=run.trace_id,
            key=f"BEFORE_TOOL_CALL:bench:{secrets.token_hex(4)}",
            checkpoint_trigger="BEFORE_TOOL_CALL",
            step_name="bench",
            subject="tool_arguments",
            payload={},
            requested_by="listener",
            resume_status="RUNNING",
        )
        broadcast_inbox(approval)
    return approval.pk, started


def poll_cost(run: Any, polls: int = 200) -> float:
    """One relay poll, in milliseconds (median), with one trace watched and nothing new."""
    import statistics

    from runs.relay import Relay

    relay = Relay(send=lambda group, message: None, watched=lambda: frozenset({str(run.pk)}))
    relay.poll()
    times = []
    for _ in range(polls):
        started = time.perf_counter()
        relay.poll()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


async def measure(args: argparse.Namespace, base_url: str, state: dict[str, Any]) -> dict:
    import aiohttp

    run, ws_base = state["run"], base_url.replace("http", "ws", 1)
    headers = {"Origin": base_url, "Cookie": state["cookie"]}
    trace_ms: list[float] = []
    inbox_ms: list[float] = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{ws_base}/ws/runs/{run.pk}/", headers=headers) as ws:
            while json.loads((await ws.receive(timeout=10)).data)["type"] != "live":
                pass
            for n in range(args.samples):
                await asyncio.sleep(random.uniform(0, 0.5))  # noqa: S311 - a phase, not a secret
                started = await asyncio.to_thread(commit_event, run, n)
                while True:
                    data = json.loads((await ws.receive(timeout=10)).data)
                    if data["type"] == "run.events" and any(
                        e["payload"].get("n") == n for e in data["events"]
                    ):
                        trace_ms.append((time.time() - started) * 1000)
                        break
        url = f"{ws_base}/ws/approvals/?list=open"
        async with session.ws_connect(url, headers=headers) as ws:
            await asyncio.sleep(0.5)  # the socket joins its groups before it accepts
            for _ in range(args.samples):
                await asyncio.sleep(random.uniform(0, 0.5))  # noqa: S311
                pk, started = await asyncio.to_thread(commit_request, run)
                while f'id="approval-{pk}"' not in (await ws.receive(timeout=10)).data:
                    pass
                inbox_ms.append((time.time() - started) * 1000)
    return {"trace": trace_ms, "inbox": inbox_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, not SQLite")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-live-"))
        if args.postgres:
            database_url = os.environ.get("DATABASE_URL") or database_create("live")
            if not os.environ.get("DATABASE_URL"):
                stack.callback(database_drop, database_url)
        else:
            database_url = f"sqlite:///{var_dir}/hierarch.sqlite3"
        for name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            os.environ.pop(name, None)
        env = environment(var_dir, database_url)
        os.environ.update(env)

        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, connections

        stack.callback(connections.close_all)  # before the database is dropped
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        state = setup()

        processes = Processes(env, var_dir)
        stack.callback(processes.stop_all)
        port = free_port()
        processes.start(
            "daphne",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["config.asgi:application"],
        )
        base_url = f"http://127.0.0.1:{port}"
        until_up(base_url, processes)
        load_before = os.getloadavg()[0]
        figures = asyncio.run(measure(args, base_url, state))
        cost = poll_cost(state["run"])
        vendor = connection.vendor

    trace, inbox = summary(figures["trace"]), summary(figures["inbox"])
    result = {
        "database": vendor,
        "samples": args.samples,
        "poll_seconds": float(os.environ.get("HIERARCH_LIVE_RELAY_SECONDS", 0.25)),
        **{f"trace_event_ms_{k}": trace[k] for k in ("p50", "p95", "min", "max")},
        **{f"inbox_row_ms_{k}": inbox[k] for k in ("p50", "p95", "min", "max")},
        "relay_poll_ms_p50": cost,
        "load_1min_before": round(load_before, 2),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"Live relay, embedded default ({vendor}, poll every {result['poll_seconds']} s)")
    print(f"  trace event, commit -> websocket frame: {trace}")
    print(f"  inbox request, commit -> pushed row:    {inbox}")
    print(f"  one relay poll, idle (1 trace watched): {cost} ms")
    print(f"  load average before: {result['load_1min_before']}")


if __name__ == "__main__":
    main()
