"""API speed: execute under sustained load, 100 concurrent runs, and a 1,000-node trace.

    .venv/bin/python bench/api.py [--rate 500] [--duration 60] [--concurrent 100]
        [--shape 10,10,10] [--trace-calls 30] [--threads 32] [--json]

Everything runs as in production, on loopback: the console (daphne serving
config.asgi:application with HIERARCH_EXECUTOR=celery), two Celery workers (prefork, one
process each), PostgreSQL (DATABASE_URL; by default a fresh database created and dropped
here) and Redis (REDIS_URL for the cache, where the throttles count, default db 10;
CELERY_BROKER_URL, default db 11). Requests carry an operator's API token
(`Authorization: Bearer`), from a pool of `--threads` threads with keep-alive connections.

1. sustained: `--rate` execute calls a minute for `--duration` seconds, open loop: each call
   is sent at its planned moment whatever the earlier ones are doing, and its answer time
   counts from that moment (a server that falls behind shows it, nothing hides in a queue
   on the client). The entity is one ACTION with one model call (the offline model); the
   two workers run the runs meanwhile. Prints p50/p95/p99/max and the errors.
2. concurrent: `--concurrent` execute calls at once (of a 3-node process: process → agent →
   action), then the time until every run has ended, and how many COMPLETED.
3. trace: a `--shape` hierarchy (10,10,10: 1,111 nodes, parallel links, as bench/engine.py
   generates it) run by the workers, then GET /api/v1/runs/{id}/trace `--trace-calls`
   times: p50/p95 over HTTP, and the size of the answer.

The throttles are set high here (HIERARCH_API_USER_RATE and _WORKSPACE_RATE 100000/minute)
so they count every request (in Redis) without refusing any. Every process started here is
stopped on the way out; the database created here is dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import harness  # noqa: E402 - bench/harness.py: the database, the processes, the percentiles
import hitl  # noqa: E402 - bench/hitl.py: the child processes' environment

GENEROUS = "100000/minute"
QUICK = {
    "metadata": {"type": "ACTION", "status": "ACTIVE", "tags": []},
    "identity": {
        "name": "quick_answer",
        "description": "Answers in one model call.",
        "persona": {"system_prompt": "You answer briefly."},
    },
    "hierarchy": {"children": []},
    "io_contract": {
        "input": {
            "schema": {
                "type": "object",
                "properties": {"question": {"type": "string", "minLength": 1}},
                "required": ["question"],
            }
        },
        "output": {"schema": {"type": "object", "properties": {"answer": {"type": "string"}}}},
    },
    "governance": {"execution_limits": {"max_recursion_depth": 5}},
}


class Caller:
    """Keep-alive HTTP clients, one per thread, with the operator's token."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.local = threading.local()

    def client(self) -> Any:
        import httpx

        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(
                base_url=self.base_url, headers=self.headers, timeout=30, trust_env=False
            )
        return self.local.client

    def execute(self, entity_id: Any, input_data: dict) -> tuple[int, dict]:
        response = self.client().post(
            f"/api/v1/entities/{entity_id}/execute", json={"input_data": input_data}
        )
        return response.status_code, response.json()

    def get(self, address: str) -> tuple[int, bytes]:
        response = self.client().get(address)
        return response.status_code, response.content


def wait_until_up(base_url: str, processes: harness.Processes, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes.check()
        try:
            if httpx.get(f"{base_url}/api/v1/runs", timeout=2, trust_env=False).status_code == 401:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("daphne did not answer:\n" + processes.log_tail("daphne"))


def wait_ended(run_ids: list[str], timeout: float, processes: harness.Processes) -> float:
    """Seconds until every run has ended (polled every 50 ms)."""
    from runs.models import TERMINAL, Run

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not Run.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL).exists():
            return time.monotonic() - started
        processes.check()
        time.sleep(0.05)
    raise SystemExit(f"runs still going after {timeout:.0f} s")


def sustained(caller: Caller, entity_id: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Open loop: call i is planned at start + i * interval and timed from then."""
    interval = 60.0 / args.rate
    count = int(args.duration * args.rate / 60)
    latencies: list[float] = []
    service: list[float] = []
    errors: dict[str, int] = {}
    run_ids: list[str] = []
    lock = threading.Lock()

    def call(index: int, planned: float) -> None:
        sent = time.perf_counter()
        try:
            code, body = caller.execute(entity_id, {"question": f"question {index}"})
        except Exception as exc:  # a failed call is a figure, not a crash
            code, body = 0, {"error": type(exc).__name__}
        done = time.perf_counter()
        with lock:
            latencies.append((done - planned) * 1000)
            service.append((done - sent) * 1000)
            if code == 202:
                run_ids.append(body["run_id"])
            else:
                error = body.get("error")
                key = f"{code} {error.get('code') if isinstance(error, dict) else error}"
                errors[key] = errors.get(key, 0) + 1

    start = time.perf_counter() + 0.2
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        for index in range(count):
            planned = start + index * interval
            pause = planned - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            pool.submit(call, index, planned)
    wall = time.perf_counter() - start
    return {
        "calls": count,
        "wall_s": round(wall, 1),
        "achieved_per_minute": round(count / wall * 60, 1),
        "answer_ms": harness.summary(latencies),
        "service_ms": harness.summary(service),
        "errors": errors,
        "run_ids": run_ids,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500, help="execute calls a minute")
    parser.add_argument("--duration", type=float, default=60, help="seconds of sustained load")
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--shape", default="10,10,10", help="the trace's hierarchy")
    parser.add_argument("--trace-calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=32, help="client threads")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for any wait")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/11")
    with ExitStack() as stack:
        if not os.environ.get("DATABASE_URL"):
            os.environ["DATABASE_URL"] = harness.database_create("api")
            stack.callback(harness.database_drop, os.environ["DATABASE_URL"])
        var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-api-"))
        env = {
            **hitl.child_environment(var_dir),
            "HIERARCH_API_USER_RATE": GENEROUS,
            "HIERARCH_API_WORKSPACE_RATE": GENEROUS,
        }
        os.environ.update(env)

        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connection, connections

        stack.callback(connections.close_all)  # before the database is dropped
        call_command("migrate", verbosity=0)

        from entities.models import Entity, Workspace
        from entities.services import entities_import, entity_save
        from governance.permissions import membership_grant
        from governance.tokens import api_token_create
        from runs.models import Run
        from runs.selectors import trace_tree

        engine_bench = __import__("engine")  # bench/engine.py: the hierarchy generator

        tag = secrets.token_hex(4)
        workspace = Workspace.objects.create(name="Bench API", slug=f"bench-api-{tag}")
        operator = get_user_model().objects.create_user(f"operator-{tag}")
        membership_grant(workspace=workspace, user=operator, role="operator")
        _, token = api_token_create(user=operator, name="bench")
        quick = entity_save(workspace=workspace, definition=QUICK).entity
        entities_import(workspace=workspace, definitions=engine_bench.bundle([1, 1], "sequential"))
        small = Entity.objects.get(workspace=workspace, type="PROCESS")
        shape = [int(part) for part in args.shape.split(",")]
        big_ws = Workspace.objects.create(name="Bench trace", slug=f"bench-trace-{tag}")
        membership_grant(workspace=big_ws, user=operator, role="operator")
        entities_import(workspace=big_ws, definitions=engine_bench.bundle(shape, "parallel"))
        big = Entity.objects.get(workspace=big_ws, type="PROCESS")

        processes = harness.Processes(env, var_dir)
        stack.callback(processes.stop_all)
        port = harness.free_port()
        processes.start(
            "daphne",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["config.asgi:application"],
        )
        for name in ("w1", "w2"):
            processes.start(
                name,
                [sys.executable, "-m", "celery", "-A", "config", "worker", "-c", "1"]
                + ["--pool", "prefork", "-l", "warning", "-n", f"bench-api-{name}-{port}@%h"],
            )
        base_url = f"http://127.0.0.1:{port}"
        wait_until_up(base_url, processes)
        caller = Caller(base_url, token)

        # Warm up: each worker imports litellm on its first model call; the server's first
        # requests import the API. Not measured.
        warm = [caller.execute(quick.pk, {"question": "warm"})[1]["run_id"] for _ in range(8)]
        wait_ended(warm, args.timeout, processes)

        # 1. Sustained execute load.
        load = sustained(caller, quick.pk, args)
        drained = wait_ended(load["run_ids"], args.timeout, processes)
        completed = Run.objects.filter(pk__in=load["run_ids"], status="COMPLETED").count()

        # 2. Concurrent runs.
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
            answers = list(pool.map(lambda _: caller.execute(small.pk, {}), range(args.concurrent)))
        accepted = [body["run_id"] for code, body in answers if code == 202]
        wait_ended(accepted, args.timeout, processes)
        all_ended_s = time.monotonic() - began
        concurrent_ok = Run.objects.filter(pk__in=accepted, status="COMPLETED").count()

        # 3. The trace of a big run.
        code, body = caller.execute(big.pk, {})
        if code != 202:
            raise SystemExit(f"the big run did not start: {code} {body}")
        big_run_s = wait_ended([body["run_id"]], args.timeout, processes)
        big_run = Run.objects.get(pk=body["run_id"])
        nodes = Run.objects.filter(trace_id=big_run.trace_id).count()
        address = f"/api/v1/runs/{big_run.pk}/trace"
        caller.get(address)  # warm
        trace_ms: list[float] = []
        size = 0
        for _ in range(args.trace_calls):
            sent = time.perf_counter()
            status, content = caller.get(address)
            trace_ms.append((time.perf_counter() - sent) * 1000)
            if status != 200:
                raise SystemExit(f"GET {address} answered {status}")
            size = len(content)
        selector_ms: list[float] = []
        for _ in range(min(args.trace_calls, 10)):
            sent = time.perf_counter()
            trace_tree(big_run)
            selector_ms.append((time.perf_counter() - sent) * 1000)

    sustained_ms = load["answer_ms"]
    result = {
        "database": connection.vendor,
        "rate_per_minute": args.rate,
        "duration_s": args.duration,
        "execute_calls": load["calls"],
        "execute_achieved_per_minute": load["achieved_per_minute"],
        "execute_ms_p50": sustained_ms["p50"],
        "execute_ms_p95": sustained_ms["p95"],
        "execute_ms_p99": sustained_ms["p99"],
        "execute_ms_max": sustained_ms["max"],
        "execute_service_ms_p95": load["service_ms"]["p95"],
        "execute_errors": load["errors"],
        "sustained_runs_completed": completed,
        "sustained_drain_s": round(drained, 1),
        "concurrent_runs": args.concurrent,
        "concurrent_accepted": len(accepted),
        "concurrent_completed": concurrent_ok,
        "concurrent_all_ended_s": round(all_ended_s, 2),
        "trace_nodes": nodes,
        "trace_run_s": round(big_run_s, 1),
        "trace_bytes": size,
        "trace_ms_p50": harness.summary(trace_ms)["p50"],
        "trace_ms_p95": harness.summary(trace_ms)["p95"],
        "trace_selector_ms_p50": harness.summary(selector_ms)["p50"],
        "load_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"execute, {args.rate:g}/minute for {args.duration:g} s ({load['calls']} calls, "
        f"{load['achieved_per_minute']}/minute sent): answer p50 {sustained_ms['p50']} ms, p95 "
        f"{sustained_ms['p95']} ms, p99 {sustained_ms['p99']} ms, max {sustained_ms['max']} ms; "
        f"errors {load['errors'] or 'none'}; {completed} of {load['calls']} runs COMPLETED, "
        f"the last {round(drained, 1)} s after the load ended"
    )
    print(
        f"{args.concurrent} concurrent runs (3 nodes each), two workers: {len(accepted)} "
        f"accepted, {concurrent_ok} COMPLETED, all ended {round(all_ended_s, 2)} s after the "
        "first call"
    )
    print(
        f"trace of a {nodes}-node run ({size:,} bytes; the run took {round(big_run_s, 1)} s): "
        f"GET p50 {result['trace_ms_p50']} ms, p95 {result['trace_ms_p95']} ms over "
        f"{args.trace_calls} calls; the selector alone p50 {result['trace_selector_ms_p50']} ms"
    )
    print(f"load average (1 min) at the end: {result['load_1m']}")


if __name__ == "__main__":
    main()
