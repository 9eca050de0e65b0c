"""Dashboard speed: the page's numbers over many runs.

    .venv/bin/python bench/dashboard.py [--runs 100000] [--entities 20] \
        [--database postgres|sqlite] [--repeat 5] [--json]

Fills a fresh database (PostgreSQL: a database created on postgres://postgres@127.0.0.1:5432
and dropped afterwards, or the server of --postgres; SQLite: a file in a temporary folder)
with one workspace, `--entities` entities and `--runs` runs spread over the last 60 days
(two thirds roots, one third their children; 80 % completed, 12 % failed, 4 % cancelled,
4 % still going), and one decided or open HITL request for every 20 runs. Then times, for
each period (24h, 7d, 30d), `dashboard_metrics` (every number of the page) and the whole page
rendered through Django's test client (filters, cards, seven SVG charts, the entity table,
alerts), with their query counts. Prints a summary, or one JSON line with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=20)
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--keep", action="store_true", help="keep the PostgreSQL database (prints its URL)"
    )
    parser.add_argument(
        "--queries", action="store_true", help="print each query of dashboard_metrics, timed"
    )
    return parser.parse_args()


def fresh_database(args: argparse.Namespace, tmp: str) -> tuple[str, str | None]:
    """(DATABASE_URL, the PostgreSQL database to drop afterwards)."""
    if args.database == "sqlite":
        return f"sqlite:///{tmp}/dashboard.sqlite3", None
    import psycopg

    name = f"hierarch_bench_dashboard_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # a name made here, never input
    return f"{args.postgres}/{name}", name


def drop_database(args: argparse.Namespace, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(runs: int, entities: int) -> tuple:
    """The workspace, a viewer of it, and the runs; answers (workspace, user, fill seconds)."""
    from django.contrib.auth import get_user_model
    from django.db.models import F
    from django.utils import timezone

    from approvals.models import Approval, ApprovalStatus
    from entities.models import Workspace
    from entities.services import entity_save
    from governance.permissions import membership_grant
    from runs.models import TERMINAL, Run, RunStatus
    from runs.store import latest_version

    started = time.perf_counter()
    workspace = Workspace.objects.create(name="bench", slug=f"bench-{uuid.uuid4().hex[:8]}")
    user = get_user_model().objects.create_user("viewer", password="bench")  # noqa: S106
    membership_grant(workspace=workspace, user=user, role="viewer")
    made = []
    for n in range(entities):
        definition = {
            "metadata": {"type": "AGENT", "status": "ACTIVE", "tags": []},
            "identity": {
                "name": f"agent_{n:03d}",
                "description": "A generated agent",
                "persona": {"system_prompt": "You are a generated agent."},
            },
        }
        entity = entity_save(workspace=workspace, definition=definition).entity
        made.append((entity, latest_version(entity)))

    rng = random.Random(7)  # noqa: S311 - benchmark data, not security
    now = timezone.now()
    statuses = (
        [RunStatus.COMPLETED] * 80
        + [RunStatus.FAILED] * 12
        + [RunStatus.CANCELLED] * 4
        + [RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.WAITING, RunStatus.BLOCKED]
    )
    roots_wanted = runs * 2 // 3
    batch: list = []
    roots: list = []

    def flush() -> None:
        Run.objects.bulk_create(batch, batch_size=2_000)
        batch.clear()

    for index in range(runs):
        entity, version = made[rng.randrange(len(made))]
        parent = None
        if index >= roots_wanted:
            parent = roots[index - roots_wanted]
        begin = (
            parent.started_at + timedelta(seconds=1)
            if parent
            else now - timedelta(seconds=rng.uniform(0, 60 * 86_400))
        )
        status = rng.choice(statuses)
        ms = int(rng.lognormvariate(8.5, 1.0))  # a median near 5 s, a long tail
        ended = begin + timedelta(milliseconds=ms) if status in TERMINAL else None
        run_id = uuid.uuid4()
        run = Run(
            id=run_id,
            trace_id=parent.trace_id if parent else run_id,
            parent=parent,
            root=parent,
            depth=1 if parent else 0,
            workspace=workspace,
            entity=entity,
            entity_version=version,
            status=status,
            started_at=begin,
            completed_at=ended,
            execution_time_ms=ms if ended else None,
            total_cost_usd=Decimal(rng.randrange(1_000, 500_000)) / 1_000_000,
            total_tokens=rng.randrange(100, 5_000),
        )
        if parent is None:
            roots.append(run)
        batch.append(run)
        if len(batch) >= 10_000 or index == roots_wanted - 1:
            flush()  # roots are written before their children
    flush()
    Run.objects.filter(workspace=workspace).update(created_at=F("started_at"))

    approvals = []
    choices = [
        (ApprovalStatus.APPROVED, "approve"),
        (ApprovalStatus.APPROVED, "edit"),
        (ApprovalStatus.APPROVED, "lock_constraint"),
        (ApprovalStatus.REJECTED, "reject"),
        (ApprovalStatus.TIMEOUT, ""),
        (ApprovalStatus.PENDING, ""),
    ]
    for run in rng.sample(roots, min(len(roots), runs // 20)):
        status, decision = rng.choice(choices)
        approvals.append(
            Approval(
                run=run,
                workspace=workspace,
                entity_id=run.entity_id,
                trace_id=run.trace_id,
                key="BEFORE_TOOL_CALL:bench:1",
                checkpoint_trigger="BEFORE_TOOL_CALL",
                status=status,
                decision=decision,
                responded_at=None if status == ApprovalStatus.PENDING else run.started_at,
            )
        )
    Approval.objects.bulk_create(approvals, batch_size=5_000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh statistics, as a database that lived would have
    return workspace, user, time.perf_counter() - started


def timed(fn, repeat: int) -> tuple[list[float], int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fn()  # warm: connections, templates, permission caches of a new user object
    times, queries = [], 0
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        queries = len(captured)
    return times, queries


def main() -> None:
    args = parse()
    with tempfile.TemporaryDirectory() as tmp:
        url, dropped = fresh_database(args, tmp)
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        os.environ.setdefault("DEBUG", "0")
        os.environ.setdefault("SECRET_KEY", "bench-only-" + "k" * 50)
        os.environ["ALLOWED_HOSTS"] = "testserver,localhost"
        for name in ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
            os.environ[name] = "0"
        os.environ["SECURE_HSTS_SECONDS"] = "0"
        try:
            run(args)
        finally:
            if dropped and not args.keep:
                drop_database(args, dropped)
            elif dropped:
                print(f"kept {url}")


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from dashboard.selectors import PERIODS, dashboard_metrics
    from runs.models import Run

    # Pages render {% static %} from the finders, as the tests do (no collectstatic here).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    call_command("migrate", verbosity=0)
    workspace, user, fill_s = fill(args.runs, args.entities)

    client = Client()
    client.force_login(user)
    results: dict = {
        "database": connection.vendor,
        "runs": Run.objects.filter(workspace=workspace).count(),
        "entities": args.entities,
        "fill_s": round(fill_s, 1),
    }
    for key, period in PERIODS.items():
        fresh = type(user).objects.get(pk=user.pk)

        def metrics(period=period, fresh=fresh) -> None:
            fresh.__dict__.pop("_hierarch_workspace_ids", None)
            dashboard_metrics(user=fresh, period=period)

        def page(key=key) -> None:
            response = client.get(f"/dashboard/?period={key}")
            assert response.status_code == 200, response.status_code

        data = dashboard_metrics(user=fresh, period=period)
        if args.queries:
            from django.test.utils import CaptureQueriesContext

            with CaptureQueriesContext(connection) as captured:
                metrics()
            for query in captured:
                print(f"{key} {float(query['time']) * 1000:8.1f} ms  {query['sql'][:400]}")
        metric_ms, metric_queries = timed(metrics, args.repeat)
        page_ms, page_queries = timed(page, args.repeat)
        results[key] = {
            "finished_in_period": data.current.finished,
            "metrics_ms_median": round(statistics.median(metric_ms), 1),
            "metrics_ms_max": round(max(metric_ms), 1),
            "metrics_queries": metric_queries,
            "page_ms_median": round(statistics.median(page_ms), 1),
            "page_ms_max": round(max(page_ms), 1),
            "page_queries": page_queries,
        }
    if args.json:
        print(json.dumps(results))
        return
    print(
        f"{results['runs']:,} runs, {args.entities} entities on {results['database']} "
        f"(filled in {results['fill_s']} s)"
    )
    for key in PERIODS:
        row = results[key]
        print(
            f"  {key:>3}: {row['finished_in_period']:>6,} finished executions | "
            f"dashboard_metrics median {row['metrics_ms_median']} ms "
            f"(max {row['metrics_ms_max']}), {row['metrics_queries']} queries | "
            f"page median {row['page_ms_median']} ms (max {row['page_ms_max']}), "
            f"{row['page_queries']} queries"
        )


if __name__ == "__main__":
    main()
